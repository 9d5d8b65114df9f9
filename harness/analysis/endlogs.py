"""The trainer's end-of-run logs (5.0: ``logs/<env>/<run_id>.ini`` in its working dir, with a
``[metrics]`` section and the run's resolved config sections, and an optional
``<run_id>.jsonl`` beside it): finding a run's newest one and reading its final metrics and its
config. The file formats are in ``docs/formats.md``.
"""

from __future__ import annotations

import configparser
import json
import os
from pathlib import Path

from harness import contain
from harness.dashboard.values import parse_number
from harness.errors import HarnessError

MAX_LOG_BYTES = 16 * 1024 * 1024  # per end-of-run log file read


def newest_log(root: Path, env: str | None = None, since: float | None = None) -> Path | None:
    """The newest ``.ini`` (by mtime, then name) under root/logs/<env>, or under every env's
    folder when env is None; None when there is none, or when it was written before since:
    an older run's record is not this run's."""
    found = _newest_log(Path(root) / "logs", env)
    if found is None or (since is not None and found[0] < since):
        return None
    return found[1]


def read_run_logs(root: Path, env: str | None = None) -> dict[str, float]:
    """Final metrics of the newest run under root/logs (root: the trainer's working dir).
    The .ini [metrics] values win over the .jsonl records; {} when there is no log."""
    ini = newest_log(root, env)
    return log_metrics(ini) if ini is not None else {}


def log_metrics(ini: Path) -> dict[str, float]:
    """Final metrics of one end-of-run log: its [metrics] values over the records of the
    .jsonl beside it."""
    out = _jsonl_metrics(ini.with_suffix(".jsonl"))
    out.update(_ini_metrics(ini))
    return out


def log_config(ini: Path) -> dict[str, dict[str, str]]:
    """The resolved config an end-of-run log records: every section but [metrics]."""
    config: dict[str, dict[str, str]] = {}
    read_ini(ini, config)
    config.pop("metrics", None)
    return config


def read_ini(path: Path, into: dict[str, dict[str, str]]) -> None:
    """Merge the sections of an ini file (a config file or an end-of-run log) into into,
    keys case kept; a file that is missing or does not parse adds nothing."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    # bounded, regular files only, bytes that are not UTF-8 replaced: a trainer's log in
    # Latin-1 must not end a passing run in an internal error
    try:
        parser.read_string(_read_capped(path), source=str(path))
    except (configparser.Error, ValueError):
        return
    for section in parser.sections():
        into.setdefault(section, {}).update(parser.items(section))


def _newest_log(logs: Path, env: str | None) -> tuple[float, Path] | None:
    """(mtime, path) of the newest .ini in logs/<env> (any env's folder when env is empty)."""
    dirs = [logs / env] if env else [d for d in _listdir(logs) if d.is_dir()]
    best: tuple[float, str, Path] | None = None
    for d in dirs:
        for path in _listdir(d):
            if path.suffix != ".ini":
                continue
            try:
                key = (path.stat().st_mtime, path.name, path)
            except OSError:
                continue
            if best is None or key[:2] > best[:2]:
                best = key
    return (best[0], best[2]) if best else None


def _listdir(d: Path) -> list[Path]:
    try:
        return sorted(d.iterdir())
    except OSError:
        return []


def _read_capped(path: Path) -> str:
    # a regular file only: a FIFO in a live run's folder must not block the read
    try:
        fd = contain.open_regular(path, what="end-of-run log")
    except HarnessError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read(MAX_LOG_BYTES).decode("utf-8", "replace")
        except OSError:
            return ""


def _ini_metrics(path: Path) -> dict[str, float]:
    """[metrics] "key = v1,v2,…": one value per downsample point; the last one is final."""
    out: dict[str, float] = {}
    in_metrics = False
    for line in _read_capped(path).splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            in_metrics = s == "[metrics]"
        elif in_metrics and "=" in s and not s.startswith(("#", ";")):
            key, _, values = s.partition("=")
            last = values.split(",")[-1].strip()
            value = parse_number(last)
            if key.strip() and value is not None:
                out[key.strip()] = value
    return out


def _jsonl_metrics(path: Path) -> dict[str, float]:
    """Numeric fields of every record, later records winning (the last record of each key)."""
    out: dict[str, float] = {}
    for line in _read_capped(path).splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[str(key)] = float(value)
    return out
