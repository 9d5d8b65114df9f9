"""Where a report lives and when it is written: a new folder per run, report.json rewritten
atomically at every stage (a harness that dies leaves the last stage it reached), the files
its checks read copied under evidence/ (a report is checked again from its own folder), and
at the end report.json brief, every other file of the report (the registry in `writers`),
then report.json in full: a full disk costs files (`report.unwritten`), never the verdict. A
`--report-dir` that cannot hold a report is refused before the run (`check_report_dir`).
`load_status` opens a saved report and tells a `running` one whose harness is gone
(`abandoned`); `mark_abandoned` records that."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness import contain
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.files import atomic_write, write_failure
from harness.outcome import USAGE
from harness.report import writers
from harness.report.model import EVIDENCE_DIR, Report, now_stamp, process_started
from harness.vocab import RunStatus, Stage

# a start time read twice for one process agrees to the clock tick; another process that
# got the same pid started later than this
SAME_START_S = 0.05
# the most of one evidence file copied into a report (its tail): a run's logs and configs are
# far smaller; more is a runaway file, or a device swapped in for one
EVIDENCE_COPY_LIMIT = 64 * 1024 * 1024


def new_run_id(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(2)}"


# ---------------------------------------------------------------- the folder, before the run


# the probe of check_report_dir: the size of a run's first report.json (a few KB), so that
# a folder with no room for that is refused before the run, not after it
_PROBE_TEXT = json.dumps({"probe": "can a report be written here? " * 128}) + "\n"


def check_report_dir(root: Path, flag: str = "--report-dir") -> None:
    """Refuse, before anything is built or run, a report folder that cannot hold a report:
    a file, a path that cannot be created, a read-only folder, a disk with no room for a
    run folder. One line naming the path, exit USAGE. A probe folder with a small file is
    written there (synced: a full disk answers now) and removed."""
    if root.exists() and not root.is_dir():
        raise HarnessError(f"{flag} {root}: not a folder", USAGE)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarnessError(
            f"{flag} {root}: cannot be created: {write_failure(exc)}", USAGE
        ) from None
    probe: Path | None = None
    try:
        probe = Path(tempfile.mkdtemp(prefix=".write-check-", dir=root))
        atomic_write(probe / REPORT_JSON, _PROBE_TEXT)
    except OSError as exc:
        raise HarnessError(
            f"{flag} {root}: a report cannot be written there: {write_failure(exc)}", USAGE
        ) from None
    finally:
        if probe is not None:
            shutil.rmtree(probe, ignore_errors=True)


# ---------------------------------------------------------------- report.json, at every stage


def save(report: Report, stage: Stage | None = None) -> bool:
    """Write report.json now (atomically): called at every stage of a run. A write that
    fails (a full disk, a folder gone read-only) is recorded in `report.unwritten`, not
    raised: the run goes on, and its verdict and exit code still reach the terminal."""
    if stage is not None:
        report.stage = stage
    report.unwritten.pop(REPORT_JSON, None)  # the file being written: no earlier failure in it
    why = _write_json(report, report.to_json())
    if why is not None:
        report.unwritten[REPORT_JSON] = why
    return why is None


def finish(report: Report, status: RunStatus = RunStatus.COMPLETE) -> None:
    """The run is over. report.json first, brief (the status, the verdict and its exit code,
    without the samples: a few KB), so that a disk that fills up costs the big files, never
    the verdict; then every other file (`writers.WRITERS`, each guarded); then report.json in
    full. A file that cannot be written is a note and an entry of `report.unwritten`, never
    an exception (the caller's exit code stays the verdict's)."""
    report.status = status
    report.finished_at = now_stamp()
    report.stage = Stage.DONE
    report.unwritten.pop(REPORT_JSON, None)  # the file being written: no earlier failure in it
    first = _write_json(report, _brief(report, BRIEF_FIRST))
    writers.write_all(report)
    why = _write_json(report, report.to_json())
    if why is None:
        return
    # the full one does not fit: the brief one again, now with the notes on what is missing
    report.unwritten[REPORT_JSON] = f"{WITHOUT_SAMPLES}: {why}"
    report.notes.append(f"report.json written without its samples: the full file failed: {why}")
    again = _write_json(report, _brief(report))
    if again is not None:
        report.unwritten[REPORT_JSON] = again if first is not None else f"{FIRST_STANDS}: {again}"


# what report.unwritten says of a report.json that holds the verdict all the same
WITHOUT_SAMPLES = "written without its samples"
FIRST_STANDS = "only its first brief version stands"


def verdict_kept(report: Report) -> bool:
    """report.json holds the run's final status and verdict (in full, or brief)."""
    why = report.unwritten.get(REPORT_JSON)
    return why is None or why.startswith((WITHOUT_SAMPLES, FIRST_STANDS))


# written into the brief report.json that precedes the other files; gone once the full one
# replaces it (a harness that died in between leaves a report that says why it is brief)
BRIEF_FIRST = (
    "report.json written first without its samples, before the other files (so that a full "
    "disk cannot cost the verdict); the full one replaces it once they are written"
)


def _brief(report: Report, note: str | None = None) -> dict[str, Any]:
    """report.json without its samples (most of its size: every thread's stacks)."""
    data = report.to_json()
    data["samples"] = None
    if note is not None:
        data["notes"] = [*data["notes"], note]
    return data


def _write_json(report: Report, data: dict[str, Any]) -> str | None:
    """Write report.json; None, or why it could not be written."""
    try:
        atomic_write(report.artifact(REPORT_JSON), json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        return write_failure(exc)
    return None


# ---------------------------------------------------------------- evidence


def evidence_path(report: Report, rel: str) -> Path:
    return report.directory / EVIDENCE_DIR / rel


def write_evidence(report: Report, name: str, rel: str, text: str) -> Path | None:
    """Write `text` as evidence/<rel> and record it in report.json's `evidence` as `name`;
    None (a note, an entry of `report.unwritten`) when the disk refuses it."""
    dest = evidence_path(report, rel)
    try:
        atomic_write(dest, text)
    except OSError as exc:
        _evidence_unwritten(report, name, rel, write_failure(exc))
        return None
    report.evidence[name] = f"{EVIDENCE_DIR}/{rel}"
    return dest


def copy_evidence(
    report: Report, name: str, src: Path, rel: str, tail_bytes: int | None = None
) -> Path | None:
    """Copy `src` (its last `tail_bytes` only, when given) to evidence/<rel> and record it
    as `name`; None when there is no such file. A copy that fails leaves a note."""
    if not src.is_file():
        return None
    dest = evidence_path(report, rel)
    try:
        # a regular file only, its last EVIDENCE_COPY_LIMIT bytes at most: a link swapped in
        # for /dev/zero or a FIFO must not make the copy endless (or block)
        fd = contain.open_regular(src, what=f"evidence {name}")
    except HarnessError as exc:
        report.notes.append(f"evidence {name} not copied: {exc.message}")
        return None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(fd, "rb") as fh:
            size = fh.seek(0, 2)
            keep = min(tail_bytes if tail_bytes is not None else size, EVIDENCE_COPY_LIMIT)
            fh.seek(max(0, size - keep))
            dest.write_bytes(fh.read(keep))
        if size > keep and tail_bytes is None:
            report.notes.append(f"evidence {name}: only its last {keep} bytes were copied")
    except OSError as exc:
        report.notes.append(f"evidence {name} not copied from {src}: {exc}")
        if _is_write_failure(exc):
            report.unwritten[f"{EVIDENCE_DIR}/{rel}"] = write_failure(exc)
        with contextlib.suppress(OSError):
            dest.unlink(missing_ok=True)  # never half a copy
        return None
    report.evidence[name] = f"{EVIDENCE_DIR}/{rel}"
    return dest


def _evidence_unwritten(report: Report, name: str, rel: str, why: str) -> None:
    report.unwritten[f"{EVIDENCE_DIR}/{rel}"] = why
    report.notes.append(f"evidence {name} not written: {why}")


# the errors of a disk that refuses a write (full, over quota, file size limit, read-only)
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _is_write_failure(exc: OSError) -> bool:
    return exc.errno in _DISK_ERRNOS


# ---------------------------------------------------------------- reading a saved report


@dataclass(frozen=True)
class SavedStatus:
    """A saved report as a reader sees it: `status` is the stored one, except that a
    `running` report whose harness is gone reads `abandoned` (`stored` keeps what the file
    says until `mark_abandoned` rewrites it)."""

    path: Path  # report.json
    data: dict[str, Any]  # as the file holds it: mark_abandoned adds to it, keeping the rest
    report: Report  # what it says, typed (report.load)
    status: RunStatus
    written_at: str  # the last write of report.json (its mtime), local ISO-8601
    why: str = ""  # abandoned: how we know; running: whether it is still going

    @property
    def stored(self) -> RunStatus:
        return self.report.status

    @property
    def stage(self) -> Stage:
        return self.report.stage

    @property
    def abandoned(self) -> bool:
        return self.status is RunStatus.ABANDONED

    @property
    def finished(self) -> bool:
        return self.status not in (RunStatus.RUNNING, RunStatus.ABANDONED)

    @property
    def self_contained(self) -> bool:
        """Written with evidence/ (docs/report-schema.md, "Self-contained reports"): the
        file has the key, empty too (a watch copies nothing); an older report lacks it.
        A fact about the file, which the typed report (evidence {} either way) cannot say."""
        return isinstance(self.data.get("evidence"), dict)

    def describe(self) -> str:
        """One line: what became of the run."""
        if self.abandoned:
            return (
                f"the run was abandoned at stage {self.stage} (report.json last written "
                f"{self.written_at}; {self.why}): the run did not finish"
            )
        if self.status is RunStatus.RUNNING:
            return f"the run has not finished: at stage {self.stage} ({self.why})"
        return f"{self.status} at stage {self.stage}"


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")


def harness_alive(report: Report) -> tuple[bool | None, str]:
    """Whether the harness that wrote a report is still running (None: this host cannot
    tell), and why."""
    pid, started, host = report.harness_pid, report.harness_started, report.harness_host
    if pid is None or started is None:
        return None, "the report does not record its harness process"
    if host and host != socket.gethostname():
        return None, f"its harness ran on host {host}"
    now_started = process_started(pid)
    if now_started is None:
        return False, f"harness pid {pid} is gone"
    if abs(now_started - float(started)) > SAME_START_S:
        return False, f"harness pid {pid} is now another process"
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False, f"harness pid {pid} has exited"
    except psutil.Error:
        return False, f"harness pid {pid} is gone"
    return True, f"harness pid {pid} is still running"


def load_status(path: Path) -> SavedStatus:
    """Open a saved report (its folder or report.json): what it says, with a `running`
    report whose harness is gone shown as `abandoned`. Nothing is written. The file is read
    as `report.load` reads any report (a regular file inside its folder, bounded, its
    schema_version and every typed value checked): one line and USAGE otherwise."""
    # the reading side is imported where it is used: the writers above never need it
    from harness.report import load, reading

    report_json, data = reading.read_report_json(path)
    report = load.report_from_json(data, report_json.parent, report_json)
    try:
        written = report_json.stat().st_mtime
    except OSError as exc:
        raise HarnessError(f"{report_json}: not a harness report: {exc}", USAGE) from exc
    stored = report.status
    written_at = report.last_written_at or _stamp(written)
    status, why = stored, ""
    if stored == RunStatus.RUNNING:
        alive, why = harness_alive(report)
        if alive is False:
            status = RunStatus.ABANDONED
    elif stored == RunStatus.ABANDONED:
        why = report.abandoned_why or ""
    return SavedStatus(report_json, data, report, status, written_at, why)


def mark_abandoned(saved: SavedStatus) -> SavedStatus:
    """Rewrite (atomically) a report whose harness died as `status: "abandoned"`, with when
    that was found, why, the time of its last write and a note. Idempotent."""
    if not saved.abandoned or saved.stored == RunStatus.ABANDONED:
        return saved
    note = (
        f"abandoned: {saved.why}; the harness died at stage {saved.stage} without finishing "
        f"the report (report.json last written {saved.written_at})"
    )
    report = dataclasses.replace(
        saved.report,
        status=RunStatus.ABANDONED,
        abandoned_at=now_stamp(),
        abandoned_why=saved.why,
        last_written_at=saved.written_at,
        notes=[*saved.report.notes, note],
    )
    # the file as it was, these keys added: a newer harness's keys and its version kept
    data = {
        **saved.data,
        "status": report.status.value,
        "notes": report.notes,
        **report.abandoned_marks(),
    }
    atomic_write(saved.path, json.dumps(data, indent=2) + "\n")
    return SavedStatus(saved.path, data, report, RunStatus.ABANDONED, saved.written_at, saved.why)
