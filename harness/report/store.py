"""Where a report lives and when it is written: a new folder per run, report.json rewritten
atomically at every stage (a harness that dies leaves the last stage it reached), and at the
end every other file of the report."""

from __future__ import annotations

import json
import secrets
import time

from harness.files import atomic_write
from harness.report import junit, markdown, stacks
from harness.report.model import Report, Stage, Status, now_stamp, plain


def new_run_id(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(2)}"


def save(report: Report, stage: Stage | None = None) -> None:
    """Write report.json now (atomically): called at every stage of a run."""
    if stage is not None:
        report.stage = stage
    atomic_write(report.artifact("report.json"), json.dumps(report.to_json(), indent=2) + "\n")


def finish(report: Report, status: Status = "complete") -> None:
    """The run is over: write every file of the report, report.json last."""
    report.status = status
    report.finished_at = now_stamp()
    if report.samples is not None:
        atomic_write(report.artifact("stacks.txt"), stacks.render_stacks(report.samples))
        atomic_write(
            report.artifact("samples.json"), json.dumps(plain(report.samples), indent=1) + "\n"
        )
    atomic_write(report.artifact("report.md"), markdown.render_report(report))
    atomic_write(report.artifact("junit.xml"), junit.render_junit(report))
    save(report, "done")
