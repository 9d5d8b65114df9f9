"""How a run-like command ends on the terminal: report.json on stdout with --json (first, so
nothing below can lose it), the summary box on stdout or, with --json, on stderr."""

from __future__ import annotations

import json
import sys

from harness.report import github
from harness.report.console import print_summary
from harness.report.model import Report


def finish(report_and_code: tuple[Report, int], as_json: bool) -> int:
    report, code = report_and_code
    if as_json:
        print(json.dumps(report.to_json(), indent=2), flush=True)
    print_summary(report, sys.stderr if as_json else sys.stdout)
    # under GitHub Actions: step summary and annotations (on stderr with --json: stdout is
    # the JSON document)
    github.publish(report, sys.stderr if as_json else sys.stdout)
    return code


def check_mark(status: str) -> str:
    return {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[status]
