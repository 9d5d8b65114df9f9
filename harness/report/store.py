"""Where a report lives and when it is written: a new folder per run, report.json rewritten
atomically at every stage (a harness that dies leaves the last stage it reached), the files
its checks read copied under evidence/ (a report is checked again from its own folder), and
at the end every other file of the report (the registry in `writers`). `load_status` opens a
saved report and tells a `running` one whose harness is gone (`abandoned`); `mark_abandoned`
records that."""

from __future__ import annotations

import datetime
import json
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import USAGE
from harness.report import writers
from harness.report.model import (
    EVIDENCE_DIR,
    Report,
    Stage,
    Status,
    now_stamp,
    process_started,
)

# a start time read twice for one process agrees to the clock tick; another process that
# got the same pid started later than this
SAME_START_S = 0.05


def new_run_id(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(2)}"


def save(report: Report, stage: Stage | None = None) -> None:
    """Write report.json now (atomically): called at every stage of a run."""
    if stage is not None:
        report.stage = stage
    atomic_write(report.artifact("report.json"), json.dumps(report.to_json(), indent=2) + "\n")


def finish(report: Report, status: Status = "complete") -> None:
    """The run is over: write every file of the report (`writers.WRITERS`, each guarded),
    report.json last."""
    report.status = status
    report.finished_at = now_stamp()
    writers.write_all(report)
    save(report, "done")


# ---------------------------------------------------------------- evidence


def evidence_path(report: Report, rel: str) -> Path:
    return report.directory / EVIDENCE_DIR / rel


def write_evidence(report: Report, name: str, rel: str, text: str) -> Path:
    """Write `text` as evidence/<rel> and record it in report.json's `evidence` as `name`."""
    dest = evidence_path(report, rel)
    atomic_write(dest, text)
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
        dest.parent.mkdir(parents=True, exist_ok=True)
        if tail_bytes is None:
            shutil.copyfile(src, dest)
        else:
            with open(src, "rb") as fh:
                size = fh.seek(0, 2)
                fh.seek(max(0, size - tail_bytes))
                dest.write_bytes(fh.read())
    except OSError as exc:
        report.notes.append(f"evidence {name} not copied from {src}: {exc}")
        return None
    report.evidence[name] = f"{EVIDENCE_DIR}/{rel}"
    return dest


# ---------------------------------------------------------------- reading a saved report


@dataclass(frozen=True)
class SavedStatus:
    """A saved report as a reader sees it: `status` is the stored one, except that a
    `running` report whose harness is gone reads `abandoned` (`stored` keeps what the file
    says until `mark_abandoned` rewrites it)."""

    path: Path  # report.json
    data: dict[str, Any]
    status: str
    stored: str
    stage: str
    written_at: str  # the last write of report.json (its mtime), local ISO-8601
    why: str = ""  # abandoned: how we know; running: whether it is still going

    @property
    def abandoned(self) -> bool:
        return self.status == "abandoned"

    @property
    def finished(self) -> bool:
        return self.status not in ("running", "abandoned")

    def describe(self) -> str:
        """One line: what became of the run."""
        if self.abandoned:
            return (
                f"the run was abandoned at stage {self.stage} (report.json last written "
                f"{self.written_at}; {self.why}): the run did not finish"
            )
        if self.status == "running":
            return f"the run has not finished: at stage {self.stage} ({self.why})"
        return f"{self.status} at stage {self.stage}"


def _stamp(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")


def harness_alive(data: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether the harness that wrote a report is still running (None: this host cannot
    tell), and why."""
    pid, started = data.get("harness_pid"), data.get("harness_started")
    host = data.get("harness_host")
    if not isinstance(pid, int) or not isinstance(started, int | float):
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
    report whose harness is gone shown as `abandoned`. Nothing is written."""
    report_json = path / "report.json" if path.is_dir() else path
    try:
        written = report_json.stat().st_mtime
        data = json.loads(report_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HarnessError(f"{report_json}: not a harness report: {exc}", USAGE) from exc
    if not isinstance(data, dict):
        raise HarnessError(f"{report_json}: not a harness report: not a JSON object", USAGE)
    stored = str(data.get("status", ""))
    stage = str(data.get("stage", ""))
    written_at = str(data.get("last_written_at") or _stamp(written))
    status, why = stored, ""
    if stored == "running":
        alive, why = harness_alive(data)
        if alive is False:
            status = "abandoned"
    elif stored == "abandoned":
        why = str(data.get("abandoned_why", ""))
    return SavedStatus(report_json, data, status, stored, stage, written_at, why)


def mark_abandoned(saved: SavedStatus) -> SavedStatus:
    """Rewrite (atomically) a report whose harness died as `status: "abandoned"`, with when
    that was found, why, the time of its last write and a note. Idempotent."""
    if not saved.abandoned or saved.stored == "abandoned":
        return saved
    note = (
        f"abandoned: {saved.why}; the harness died at stage {saved.stage} without finishing "
        f"the report (report.json last written {saved.written_at})"
    )
    data = {
        **saved.data,
        "status": "abandoned",
        "abandoned_at": now_stamp(),
        "abandoned_why": saved.why,
        "last_written_at": saved.written_at,
        "notes": [*list(saved.data.get("notes") or []), note],
    }
    atomic_write(saved.path, json.dumps(data, indent=2) + "\n")
    return SavedStatus(
        saved.path, data, "abandoned", "abandoned", saved.stage, saved.written_at, saved.why
    )
