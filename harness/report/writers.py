"""The files `store.finish` writes into a report folder, as a registry: one entry per file,
in the order they are written (report.html last: its list of files links the others). Each
writer runs under one guard: a writer that fails leaves a note in the report instead of
costing the others, or report.json, which `finish` writes before them (brief) and after them
(in full). A write that fails on the disk (full, over quota, read-only) is also recorded in
`report.unwritten`, which the terminal reports in one line.

Adding a report format: one `Writer` entry here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from harness.filenames import JUNIT_XML, REPORT_HTML, REPORT_MD, SAMPLES_JSON, STACKS_TXT
from harness.files import atomic_write, write_failure
from harness.report import html, junit, markdown, stacks
from harness.report.model import Report, plain


@dataclass(frozen=True)
class Writer:
    name: str  # the file in the report folder
    render: Callable[[Report], str | None]  # its text; None: nothing to write for this run


def _stacks_txt(report: Report) -> str | None:
    return stacks.render_stacks(report.samples) if report.samples is not None else None


def _samples_json(report: Report) -> str | None:
    if report.samples is None:
        return None
    return json.dumps(plain(report.samples), indent=1) + "\n"


WRITERS: tuple[Writer, ...] = (
    Writer(STACKS_TXT, _stacks_txt),
    Writer(SAMPLES_JSON, _samples_json),
    Writer(REPORT_MD, markdown.render_report),
    Writer(JUNIT_XML, junit.render_junit),
    Writer(REPORT_HTML, html.render_html),  # last: it links the files written before it
)


def write_all(report: Report, writers: tuple[Writer, ...] = WRITERS) -> list[str]:
    """Write each file of the report, in order; the names written. A writer that raises
    (a rendering bug, a full disk) adds a note to the report and the next one runs: after a
    full disk, a smaller file may still fit."""
    written = []
    for writer in writers:
        try:
            text = writer.render(report)
            if text is not None:
                atomic_write(report.artifact(writer.name), text)
                written.append(writer.name)
        except OSError as exc:  # the disk, not the renderer: the file is missing, no more
            why = write_failure(exc)
            report.unwritten[writer.name] = why
            report.notes.append(f"{writer.name} not written: {why}")
        except Exception as exc:
            report.notes.append(f"{writer.name} not written: {exc!r}")
    return written
