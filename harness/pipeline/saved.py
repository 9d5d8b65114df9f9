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
from harness.report.model import CONFIG_EVIDENCE, EVIDENCE_DIR, RUN_EVIDENCE, Report
from harness.report.store import SavedStatus
from harness.vocab import CheckStatus, RunMode

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
    report: Report | None = None  # None: a raw output log
    # a report.json that is a link, a FIFO or a device is refused by load_status, not
    # mistaken for a raw output log
    if report_json.name == REPORT_JSON and (report_json.exists() or report_json.is_symlink()):
        status = store.load_status(report_json)
        if status.abandoned:  # a running report whose harness died: record it, if we may
            with contextlib.suppress(OSError):  # a read-only artifact is still checked
                status = store.mark_abandoned(status)
        report = status.report
        log = report_json.with_name(OUTPUT_LOG)
    elif target.exists() and not target.is_dir():
        log = target  # a FIFO or a device is refused when it is read
    else:
        raise HarnessError(f"{target}: no such report folder or output log", USAGE)
    folder = report_json.parent
    self_contained = status is not None and status.self_contained
    if self_contained:
        check_evidence_tree(folder)
    notes: list[str] = []
    if status is not None and not status.finished:
        notes.append(status.describe())
    if status is not None and not self_contained:
        notes.append(NOT_REPRODUCIBLE)
    command = report.command if report is not None else None
    text, cut = read_log(log, required=status is None)
    if cut:
        notes.append(cut)
    if report is not None and self_contained:
        pin, scenario = _from_evidence(opts, report, folder)
        # evidence/run holds this run's end-of-run log only: no start-time filter
        tree, run_dir, since = folder / CONFIG_EVIDENCE, folder / RUN_EVIDENCE, 0.0
    else:
        pin, scenario = _named(opts, report)
        # the same evaluation as the live run once did: the build's config files and, while
        # they still exist, the run's own end-of-run logs in its working folder
        build = report.build if report is not None else None
        # a tree the report does not name ("", which Path reads as ".") is no tree
        tree = build.tree if build is not None and build.tree.parts else NOWHERE
        run_dir = Path(command.cwd) if command is not None and command.cwd else NOWHERE
        since = _epoch(report.started_at) if report is not None else float("inf")
    if scenario is None:
        if status is not None and not status.finished:
            raise HarnessError(f"{status.describe()}; no scenario to check", CHECK_FAILED)
        raise HarnessError("a raw output log needs --scenario NAME", USAGE)
    settings = scenario.settings(pin.lineage)
    steps = opts.steps if opts.steps is not None else (command.steps if command else None)
    watched = report is not None and report.mode is RunMode.WATCH
    parser = opts.parser or (command.parser if watched and command is not None else None)
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
            argv=list(command.argv) if command is not None else [],
            # a build tree that is gone (or none: a raw log) has no config files to read
            config_files=(settings.config_files or pin.config_files) if tree.is_dir() else (),
            started_at=since,
            steps=steps or None,
        )
    )
    return SavedCheck(results, f"{len(frames)} frames from {log}", notes, status)


def _named_pin(opts: CheckOptions, report: Report | None) -> Pin:
    """--pin, else the pin a report names (its file while it exists, else its name)."""
    info = report.pin if report is not None else None
    pin_file = Path(info.file) if info is not None and info.file else None
    from_report = str(pin_file) if pin_file and pin_file.is_file() else (info and info.name)
    return load_pin(str(opts.pin or from_report or "replica"))


def _named_scenario(opts: CheckOptions, report: Report | None) -> Scenario | None:
    """--scenario, else the report's env's scenario; None for a raw log or a watch."""
    name = opts.scenario or (report.env if report is not None else None)
    return load_scenario(name) if name else None


def _named(opts: CheckOptions, report: Report | None) -> tuple[Pin, Scenario | None]:
    return _named_pin(opts, report), _named_scenario(opts, report)


def _from_evidence(opts: CheckOptions, report: Report, folder: Path) -> tuple[Pin, Scenario | None]:
    """The pin and scenario as the run used them, from its evidence/ (--pin and --scenario
    win); a report that kept none (a watch) names them as before."""
    pin_rel, scenario_rel = report.evidence.get("pin"), report.evidence.get("scenario")
    if opts.pin is None and pin_rel:
        path = folder / pin_rel
        data = reading.read_json(folder, pin_rel, "unreadable pin evidence")
        if not isinstance(data, dict):
            raise HarnessError(f"{path}: unreadable pin evidence: not a JSON object", USAGE)
        lineage = report.pin.lineage if report.pin is not None else []
        pin = parse_pin(data, path, tuple(lineage[1:]))
    else:
        pin = _named_pin(opts, report)
    if opts.scenario is None and scenario_rel:
        # checked (inside the folder, a regular file, under the cap) before the loader reads
        what = f"evidence scenario {scenario_rel!r}"
        reading.read_bytes(folder, scenario_rel, what, reading.EVIDENCE_LIMIT)
        scenario: Scenario | None = load_scenario(str(confined(folder, scenario_rel, what=what)))
    else:
        scenario = _named_scenario(opts, report)
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


def _epoch(stamp: str) -> float:
    """A report's started_at as a Unix time; without one, no end-of-run log is trusted."""
    try:
        return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return float("inf")
