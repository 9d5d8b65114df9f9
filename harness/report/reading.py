"""Bounded reads of a saved report's folder: report.json and every evidence file are
resolved inside the folder and read as regular files (`harness.contain`: no FIFO, device or
link out), at most a size cap, JSON at most `MAX_DEPTH` deep, report.json's schema_version
one this harness reads. Each refusal is one `HarnessError` line with the USAGE exit code.
What the bytes then mean is `report.load`'s business."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.contain import confined, read_regular
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import USAGE
from harness.report.model import SCHEMA_VERSION

REPORT_JSON_LIMIT = 64 * 1024 * 1024  # report.json: a long run's is a few MB (its samples)
EVIDENCE_LIMIT = 64 * 1024 * 1024  # one evidence file (the pin, the scenario, a config file)
MAX_DEPTH = 64  # JSON nesting: a report is about 8 deep (samples → stacks → frames → inline)
SCHEMA_VERSIONS_READ = tuple(range(1, SCHEMA_VERSION + 1))


def read_report_json(path: Path) -> tuple[Path, dict[str, Any]]:
    """report.json (of a folder, or the file) read bounded and checked for nesting and its
    schema_version: (its path, its object). Not yet mapped onto the model."""
    report_json = path / REPORT_JSON if path.is_dir() else path
    if not report_json.exists() and not report_json.is_symlink():
        where = f"{path} has no report.json" if path.is_dir() else f"{path}: no such file"
        raise HarnessError(f"not a harness report: {where}", USAGE)
    data = read_json(
        report_json.parent, report_json.name, "not a harness report", REPORT_JSON_LIMIT
    )
    if not isinstance(data, dict):
        raise HarnessError(f"{report_json}: not a harness report: not a JSON object", USAGE)
    check_schema_version(data, report_json)
    return report_json, data


def read_bytes(folder: Path, rel: str, what: str, limit: int) -> bytes:
    """A file of a report folder: `rel` resolved inside `folder`, a regular file, at most
    `limit` bytes; else one line naming it (`what`: which file of the report it is)."""
    label = f"{folder}: {what}"
    return read_regular(confined(folder, rel, what=label), what=label, limit=limit)


def read_json(folder: Path, rel: str, what: str, limit: int = EVIDENCE_LIMIT) -> Any:
    """A JSON file of a report folder, read as `read_bytes` does and parsed: UTF-8, nesting
    at most MAX_DEPTH. `what` says what the file is in any error."""
    raw = read_bytes(folder, rel, what, limit)  # bounded before it is parsed
    where = f"{folder / rel}: {what}"
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise HarnessError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, an int of 5000 digits
        raise HarnessError(f"{where}: not valid JSON: {exc}", USAGE) from None
    _check_depth(data, where)
    return data


def _check_depth(data: Any, where: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH (iteratively: a deep value must not be
    walked by recursion here either)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise HarnessError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack += [(v, depth + 1) for v in items if isinstance(v, dict | list)]


def check_schema_version(data: dict[str, Any], report_json: Path) -> None:
    """report.json's schema_version is one this harness reads (absent: the first)."""
    version = data.get("schema_version", 1)
    reads = ", ".join(map(str, SCHEMA_VERSIONS_READ))
    if isinstance(version, bool) or not isinstance(version, int):
        raise HarnessError(f"{report_json}: schema_version {json.dumps(version)} is not a number")
    if version > max(SCHEMA_VERSIONS_READ):
        raise HarnessError(
            f"{report_json}: report.json schema_version {version} is newer than this harness "
            f"reads ({reads}): read it with a newer harness"
        )
    if version not in SCHEMA_VERSIONS_READ:
        raise HarnessError(
            f"{report_json}: report.json schema_version {version} is unknown "
            f"(this harness reads {reads})"
        )
