"""`harness check`: a scenario's checks re-run on a saved report or output log, without the
trainer, evaluated exactly like a live run.

A report with `evidence` (docs/report-schema.md, "Self-contained reports") is checked from
its own folder only: the frames from output.log, the pin and scenario as used, the config
files and the end-of-run log the run's checks read, all under evidence/. An older report is
checked as before, from the build tree and the run's working folder, which later runs may
have rewritten. A report whose harness died (`abandoned`) is marked so on disk and never
passes.

A saved report is read as `report.load` reads one: report.json and the evidence as regular
files inside the report folder, each under its size cap (a link `evidence/pin.json ->
/dev/zero`, a FIFO, a folder are refused before a byte is read), JSON nesting and the
schema_version checked, every typed value checked; output.log to its last
`OUTPUT_LOG_LIMIT` bytes. Every refusal is one line and USAGE."""

from __future__ import annotations

import contextlib
import datetime
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from harness import dashboard
from harness.analysis import checks as checksmod
from harness.config.pin import Pin, load_pin, parse_pin
from harness.config.scenario import Scenario, load_scenario
from harness.contain import confined, open_regular
from harness.errors import HarnessError
from harness.filenames import OUTPUT_LOG, REPORT_JSON
from harness.outcome import CHECK_FAILED, USAGE
from harness.pipeline.options import CheckOptions
from harness.report import reading, store
from harness.report.model import CONFIG_EVIDENCE, EVIDENCE_DIR, RUN_EVIDENCE
from harness.report.store import SavedStatus
from harness.vocab import CheckStatus

NOWHERE = Path("/nonexistent")
NOT_REPRODUCIBLE = (
    "this report has no evidence/ (written before self-contained reports): its config and "
    "end-of-run log are read from the build tree and run folder, which later runs may have "
    "rewritten, so the result may not be reproducible"
)
OUTPUT_LOG_LIMIT = 256 * 1024 * 1024  # output.log: the checks read its last this many bytes
EVIDENCE_FILES_LIMIT = 10_000  # entries under evidence/: a run copies a handful


@dataclass
class SavedCheck:
    """The checks of a saved report or log, where they were read from, and what to know."""

    results: list[checksmod.CheckResult]
    source: str  # the frames: how many, from which output log
    notes: list[str] = field(default_factory=list)
    status: SavedStatus | None = None  # None for a raw output log

    @property
    def unfinished(self) -> bool:
        """The run did not finish (abandoned, or still going): nothing it shows passes."""
        return self.status is not None and not self.status.finished

    @property
    def failed(self) -> list[checksmod.CheckResult]:
        return [r for r in self.results if r.status == CheckStatus.FAIL]


def check_saved(opts: CheckOptions) -> SavedCheck:
    """Re-run a scenario's checks on a saved report or output log, without the trainer."""
    target = opts.target
    report_json = target / REPORT_JSON if target.is_dir() else target
    status: SavedStatus | None = None
    saved: dict[str, object] = {}
    # a report.json that is a link, a FIFO or a device is refused by load_status, not
    # mistaken for a raw output log
    if report_json.name == REPORT_JSON and (report_json.exists() or report_json.is_symlink()):
        status = store.load_status(report_json)
        if status.abandoned:  # a running report whose harness died: record it, if we may
            with contextlib.suppress(OSError):  # a read-only artifact is still checked
                status = store.mark_abandoned(status)
        saved = status.data
        log = report_json.with_name(OUTPUT_LOG)
    elif target.exists() and not target.is_dir():
        log = target  # a FIFO or a device is refused when it is read
    else:
        raise HarnessError(f"{target}: no such report folder or output log", USAGE)
    folder = report_json.parent
    evidence = saved.get("evidence")
    if isinstance(evidence, dict):
        check_evidence_tree(folder)
    notes: list[str] = []
    if status is not None and not status.finished:
        notes.append(status.describe())
    if status is not None and not isinstance(evidence, dict):
        notes.append(NOT_REPRODUCIBLE)
    command = _table_of(saved, "command")
    text, cut = read_log(log, required=status is None)
    if cut:
        notes.append(cut)
    if isinstance(evidence, dict):
        pin, scenario = _from_evidence(opts, saved, folder, evidence)
        # evidence/run holds this run's end-of-run log only: no start-time filter
        tree, run_dir, since = folder / CONFIG_EVIDENCE, folder / RUN_EVIDENCE, 0.0
    else:
        pin, scenario = _named(opts, saved)
        # the same evaluation as the live run once did: the build's config files and, while
        # they still exist, the run's own end-of-run logs in its working folder
        tree = Path(str(_table_of(saved, "build").get("tree") or NOWHERE))
        run_dir = Path(str(command.get("cwd") or NOWHERE))
        since = _epoch(saved.get("started_at"))
    if scenario is None:
        if status is not None and not status.finished:
            raise HarnessError(f"{status.describe()}; no scenario to check", CHECK_FAILED)
        raise HarnessError("a raw output log needs --scenario NAME", USAGE)
    settings = scenario.settings(pin.lineage)
    steps = opts.steps if opts.steps is not None else command.get("steps")
    parser = opts.parser or (command.get("parser") if saved.get("mode") == "watch" else None)
    try:
        parsed = dashboard.parse_text(str(parser or pin.parser), text)
    except ValueError as exc:  # an unknown --parser
        raise HarnessError(str(exc), USAGE) from exc
    frames = [f for f in parsed if f.complete]
    if status is not None and not status.finished and not frames:
        raise HarnessError(f"{status.describe()}; no dashboard frame to check", CHECK_FAILED)
    results, _ = checksmod.run_checks(
        checksmod.CheckInputs(
            checks=scenario.checks,
            pin=pin.lineage,
            frames=frames,
            tree=tree,
            run_dir=run_dir,
            env=settings.upstream_env,
            argv=[str(a) for a in _list_of(command, "argv")],
            # a build tree that is gone (or none: a raw log) has no config files to read
            config_files=(settings.config_files or pin.config_files) if tree.is_dir() else (),
            started_at=since,
            steps=int(str(steps)) if steps else None,
        )
    )
    return SavedCheck(results, f"{len(frames)} frames from {log}", notes, status)


def _named_pin(opts: CheckOptions, saved: dict[str, object]) -> Pin:
    """--pin, else the pin a report names (its file while it exists, else its name)."""
    pin_info = _table_of(saved, "pin")
    pin_file = Path(str(pin_info.get("file", "")))
    pin_ref = opts.pin or (str(pin_file) if pin_file.is_file() else pin_info.get("name"))
    return load_pin(str(pin_ref or "replica"))


def _named_scenario(opts: CheckOptions, saved: dict[str, object]) -> Scenario | None:
    """--scenario, else the report's env's scenario; None for a raw log or a watch."""
    name = opts.scenario or (str(saved["env"]) if saved.get("env") else None)
    return load_scenario(name) if name else None


def _named(opts: CheckOptions, saved: dict[str, object]) -> tuple[Pin, Scenario | None]:
    return _named_pin(opts, saved), _named_scenario(opts, saved)


def _from_evidence(
    opts: CheckOptions, saved: dict[str, object], folder: Path, evidence: dict[str, object]
) -> tuple[Pin, Scenario | None]:
    """The pin and scenario as the run used them, from its evidence/ (--pin and --scenario
    win); a report that kept none (a watch) names them as before."""
    pin_rel, scenario_rel = evidence.get("pin"), evidence.get("scenario")
    if opts.pin is None and isinstance(pin_rel, str):
        path = folder / pin_rel
        data = reading.read_json(folder, pin_rel, "unreadable pin evidence")
        if not isinstance(data, dict):
            raise HarnessError(f"{path}: unreadable pin evidence: not a JSON object", USAGE)
        lineage = [str(n) for n in _list_of(_table_of(saved, "pin"), "lineage")]
        pin = parse_pin(data, path, tuple(lineage[1:]))
    else:
        pin = _named_pin(opts, saved)
    if opts.scenario is None and isinstance(scenario_rel, str):
        # checked (inside the folder, a regular file, under the cap) before the loader reads
        what = f"evidence scenario {scenario_rel!r}"
        reading.read_bytes(folder, scenario_rel, what, reading.EVIDENCE_LIMIT)
        scenario: Scenario | None = load_scenario(str(confined(folder, scenario_rel, what=what)))
    else:
        scenario = _named_scenario(opts, saved)
    return pin, scenario


def read_log(log: Path, required: bool) -> tuple[str, str | None]:
    """An output log as text (undecodable bytes replaced): a regular file, its last
    OUTPUT_LOG_LIMIT bytes, with a note when it was cut. A report's log may be missing
    (""); a raw log named on the command line may not (`required`)."""
    if not required and not log.exists() and not log.is_symlink():
        return "", None
    what = f"output log {log}"
    # a report's output.log must be in its folder; a raw log is where the user says
    path = log if required else confined(log.parent, log.name, what=what)
    with os.fdopen(open_regular(path, what=what), "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - OUTPUT_LOG_LIMIT))
        data = fh.read(OUTPUT_LOG_LIMIT)
    if size <= OUTPUT_LOG_LIMIT:
        return data.decode("utf-8", "replace"), None
    note = f"{log} is {size} bytes: the checks read its last {OUTPUT_LOG_LIMIT} bytes"
    return data.decode("utf-8", "replace"), note


def check_evidence_tree(folder: Path) -> None:
    """Every entry under evidence/ is a regular file or folder inside the report folder,
    each file under the evidence cap: the checks read the config files and end-of-run logs
    there by path, so a link to /dev/zero or out of the folder, or a FIFO, is refused here,
    before any of them is opened."""
    base = folder / EVIDENCE_DIR
    if not base.is_dir() or base.is_symlink():
        if base.exists() or base.is_symlink():
            raise HarnessError(f"{base}: evidence is not a folder inside the report", USAGE)
        return
    seen = 0
    for top, dirs, files in os.walk(base):  # links are not followed into
        for name in [*dirs, *files]:
            seen += 1
            if seen > EVIDENCE_FILES_LIMIT:
                raise HarnessError(f"{base}: more than {EVIDENCE_FILES_LIMIT} entries", USAGE)
            entry = Path(top, name)
            rel = str(entry.relative_to(folder))
            resolved = confined(folder, rel, what=f"{folder}: evidence {rel!r}")
            mode = resolved.stat().st_mode if resolved.exists() else 0
            if stat.S_ISDIR(mode) and not entry.is_symlink():
                continue
            if not stat.S_ISREG(mode):
                why = "a folder link" if stat.S_ISDIR(mode) else "not a regular file"
                raise HarnessError(f"{entry}: evidence refused: {why}", USAGE)
            if resolved.stat().st_size > reading.EVIDENCE_LIMIT:
                raise HarnessError(
                    f"{entry}: evidence refused: larger than {reading.EVIDENCE_LIMIT} bytes", USAGE
                )


def _table_of(data: dict[str, object], key: str) -> dict[str, object]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _list_of(data: dict[str, object], key: str) -> list[object]:
    value = data.get(key)
    return value if isinstance(value, list) else []


def _epoch(stamp: object) -> float:
    """A report's started_at as a Unix time; without one, no end-of-run log is trusted."""
    try:
        return datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return float("inf")
