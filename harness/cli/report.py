"""`harness report PATH`: show a saved report again, without running anything: the terminal
summary, and with --html its report.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.filenames import REPORT_HTML
from harness.files import atomic_write
from harness.outcome import USAGE

NAME = "report"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="show a saved report again (summary, report.html)",
        description="Read a saved report (its folder or its report.json) and print its "
        "summary; with --html, write report.html (one self-contained page: verdict, "
        "timeline, merged stack tree, checks, pin, build, output) into its folder, or to "
        "--out. Runs nothing; exits 0 once rendered.",
    )
    p.add_argument("path", type=Path, help="a report folder or its report.json")
    p.add_argument("--html", action="store_true", help="write report.html into the folder")
    p.add_argument(
        "--out", type=Path, help="write the page here instead (a file, or a folder for report.html)"
    )


def command(args: argparse.Namespace) -> int:
    from harness.report.console import print_summary
    from harness.report.html import render_html
    from harness.report.load import load_report

    report = load_report(args.path)
    print_summary(report, sys.stdout)
    if args.html or args.out is not None:
        out: Path = args.out if args.out is not None else report.directory / REPORT_HTML
        if out.is_dir():
            out = out / REPORT_HTML
        try:
            atomic_write(out, render_html(report, page_dir=out.parent))
        except OSError as exc:  # a read-only artifact folder: say so, in one line
            raise HarnessError(f"cannot write {out}: {exc.strerror or exc}", USAGE) from exc
        print(f"html: {out}")
    return 0
