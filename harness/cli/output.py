"""How a run-like command ends on the terminal: report.json on stdout with --json (first, so
nothing below can lose it), the summary box on stdout or, with --json, on stderr; and
whatever the disk did, the verdict and the exit code: a summary that cannot be printed
becomes one verdict line on stderr, a report file that could not be written one line that
names it."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.errors import Interrupted
from harness.filenames import REPORT_JSON

# the pipeline and the report writers are imported when a run ends, not when the parser
# is built (harness.cli.options says why)
if TYPE_CHECKING:
    from harness.report.model import Report


def finish(report_and_code: tuple[Report, int], as_json: bool) -> int:
    from harness.pipeline.run import RunInterrupted

    report, code = report_and_code
    try:
        return _finish(report, code, as_json)
    except RunInterrupted:
        raise
    except Interrupted as exc:  # the report is written already: main names it
        raise RunInterrupted(exc.signum, report, report.stage) from exc


def _finish(report: Report, code: int, as_json: bool) -> int:
    from harness.report import github
    from harness.report.console import print_summary

    out = sys.stderr if as_json else sys.stdout
    shown = True
    if as_json:
        shown = _shown(lambda: print(json.dumps(report.to_json(), indent=2), flush=True))
    shown = _shown(lambda: print_summary(report, out)) and shown
    if not shown:
        _line(verdict_line(report, code))
    # under GitHub Actions: step summary and annotations (on stderr with --json: stdout is
    # the JSON document); the step summary is a file, on the disk that may be full
    _shown(lambda: github.publish(report, out), "the GitHub step summary")
    if (missing := unwritten_line(report)) is not None:
        _line(missing)
    return code


def verdict_line(report: Report, code: int) -> str:
    """The verdict in one line, for when the summary box could not be shown."""
    summary = report.verdict.summary if report.verdict else report.status
    return f"harness: verdict {report.kind}: {summary} (exit {code}; report: {report.directory})"


def unwritten_line(report: Report) -> str | None:
    """One line naming the report files the disk refused, and where the verdict is kept;
    None when every file was written."""
    from harness.report import store

    if not report.unwritten:
        return None
    others = {name: why for name, why in report.unwritten.items() if name != REPORT_JSON}
    parts = []
    if others:
        whys = "; ".join(sorted(set(others.values())))
        parts.append(f"{', '.join(others)} not written ({whys})")
    path = report.artifact(REPORT_JSON)
    if REPORT_JSON not in report.unwritten:
        parts.append(f"report.json has the verdict: {path}")
    elif store.verdict_kept(report):
        parts.append(f"report.json has the verdict, not the samples: {path}")
    else:
        why = report.unwritten[REPORT_JSON]
        parts.append(f"report.json not written ({why}): the verdict above is all there is")
    return f"harness: report incomplete: {'; '.join(parts)}"


def _shown(show: Callable[[], None], what: str = "") -> bool:
    """Run `show`; False when the terminal or the disk refused it (a closed pipe still ends
    the command: BrokenPipeError reaches main)."""
    try:
        show()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if what:
            _line(f"harness: {what} not written: {exc}")
        return False
    return True


def _line(text: str) -> None:
    with contextlib.suppress(OSError):  # stderr is gone too: the exit code is all that is left
        print(text, file=sys.stderr, flush=True)


def check_mark(status: str) -> str:
    return {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[status]
