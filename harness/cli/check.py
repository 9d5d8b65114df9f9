"""`harness check TARGET`: re-run a scenario's checks on a saved report or output log."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness import outcome
from harness.cli import options
from harness.cli.output import check_mark
from harness.outcome import CheckExit
from harness.text import terminal_safe

NAME = "check"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("check"),
        help="re-run a scenario's checks on a saved report or log",
        description="Evaluate a scenario's checks on a saved report folder (or its "
        "report.json, or a raw output log) exactly as a live run does.",
    )
    p.add_argument("target", type=Path, help="a report folder, its report.json, or an output log")
    p.add_argument("--scenario", help="scenario name or path (default: the report's env)")
    p.add_argument("--pin", help="pin whose parser and checks apply (default: the report's)")
    p.add_argument("--parser", help="output parser: puffer5, puffer3, lines (default: the pin's)")
    p.add_argument(
        "--steps", type=options.positive_int, help="requested steps (default: the report's)"
    )
    options.add_json_option(p, "the check results as JSON")


def command(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes, 1 when one fails or the run did not finish."""
    from harness.pipeline.options import CheckOptions
    from harness.pipeline.saved import check_saved

    opts = CheckOptions(args.target, args.scenario, args.pin, args.parser, args.steps)
    checked = check_saved(opts)
    results, failed = checked.results, checked.failed
    status = checked.status
    if args.json:
        data = {
            "source": checked.source,
            "status": status.status if status is not None else None,
            "notes": checked.notes,
            "checks": [vars(r) for r in results],
        }
        print(json.dumps(data, indent=2))
    else:
        print(f"harness check: {terminal_safe(checked.source)}")
        for note in checked.notes:
            print(f"  note: {terminal_safe(note)}")
        for r in results:
            tail = f"  ({r.message})" if r.message else ""
            line = f"{r.name}: observed {r.observed}, bound {r.bound}{tail}"
            print(f"  {check_mark(r.status)} {terminal_safe(line)}")
        print(f"{len(results) - len(failed)}/{len(results)} checks passed")
        if checked.unfinished and status is not None:
            print(f"not a pass: the run did not finish ({status.status} at stage {status.stage})")
    return CheckExit.FAILED if failed or checked.unfinished else CheckExit.PASSED
