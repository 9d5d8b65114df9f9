"""`harness bisect` (the search, with a report) and `harness bisect-step` (the test for
`git bisect run`: exit 0 good, 1 bad, 125 skip, 255 abort)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from harness import outcome
from harness.bisect import EXPECTS, BisectOptions, bisect, bisect_step, print_summary
from harness.bisect.model import DEFAULT_REPEAT_CAP, HAZARD, Repeat
from harness.build import cache_root
from harness.cli import options
from harness.errors import HarnessError
from harness.hazards.expect import HazardExpect
from harness.outcome import BisectStepExit
from harness.vocab import AUTO

NAMES = ("bisect", "bisect-step")


def repeat_value(text: str) -> Repeat:
    """`--repeat`: a number of runs of at least 1, or `auto`."""
    if text == AUTO:
        return AUTO
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number nor auto: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or auto), not {n}")
    return n


def probability(text: str) -> float:
    """`--confidence`: a probability above 0.5 and below 1."""
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.5 < p < 1:
        raise argparse.ArgumentTypeError(f"must lie between 0.5 and 1 (both excluded), not {p:g}")
    return p


def expect_value(text: str) -> str | HazardExpect:
    """`--expect`: a failure word of EXPECTS, or hazard:KIND[:LOCATION]."""
    if text.startswith("hazard:"):
        return options.hazard_expect(text)
    if text not in EXPECTS or text == HAZARD:
        words = ", ".join(e for e in EXPECTS if e != HAZARD)
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {words}, hazard:KIND[:LOCATION])"
        )
    return text


def _add_common(p: argparse.ArgumentParser) -> None:
    options.add_env_argument(p)
    p.add_argument("--pin", help="git pin name or .toml path (default: pufferlib-5.0)")
    p.add_argument("--checkout", type=Path, help="the upstream git checkout")
    p.add_argument("--variant", default="stock", help="variant built at every step")
    options.add_scenario_options(p)
    options.add_watch_options(p, per=" per run", expect=False)
    p.add_argument(
        "--expect",
        type=expect_value,
        default="hang",
        metavar="|".join([*EXPECTS, "hazard:KIND[:LOCATION]"]),
        help="the failure that makes a commit bad (default: hang); hazard:KIND[:LOCATION]: a "
        "run that shows that hazard (docs/hazards.md), on a host where it never hangs",
    )
    p.add_argument("--location", help="a bad commit's verdict must be located here (env_start)")
    p.add_argument(
        "--repeat",
        type=repeat_value,
        default=None,
        metavar="N|auto",
        help="the classic binary search instead of the posterior one (the default: every run "
        "evidence, the next where it tells the most, until --confidence): N runs per commit, "
        "bad at the first that shows the failure, good after N clean runs; auto: the bad "
        "end's failure rate decides a commit's clean runs (docs/bisect.md)",
    )
    p.add_argument(
        "--confidence",
        type=probability,
        default=0.95,
        metavar="P",
        help="the posterior search stops when one commit is the first bad one with this "
        "probability (default 0.95)",
    )


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "bisect",
        epilog=outcome.exit_help("bisect"),
        help="find the first bad commit between --good and --bad",
        description="Search the first-parent history between --good and --bad for the first "
        "commit that shows the expected failure, building (cached) and running each tested "
        "commit like `harness run`. See docs/bisect.md.",
    )
    _add_common(p)
    p.add_argument("--good", required=True, help="a commit that passes")
    p.add_argument("--bad", required=True, help="a later commit that shows the failure")
    p.add_argument("--confirm-fix", metavar="VARIANT", help="also run this variant on the answer")
    p.add_argument(
        "--max-runs",
        type=options.positive_int,
        metavar="N",
        help="the posterior search's budget of runs (default: none; it stops at --confidence)",
    )
    p.add_argument(
        "--budget",
        type=options.positive_seconds,
        metavar="SECONDS",
        help="the posterior search's budget of time: past it, the likeliest commit with its "
        "probability",
    )
    p.add_argument(
        "--repeat-cap",
        type=options.positive_int,
        default=DEFAULT_REPEAT_CAP,
        metavar="N",
        help=f"with --repeat auto, the most runs of one commit (default {DEFAULT_REPEAT_CAP})",
    )
    options.add_report_options(p)
    options.add_json_option(p, "the bisect's report.json")
    # its own usage errors must abort `git bisect run` (255): any code from 1 to 127 would
    # mark the commit bad, and a typo would then "find" a first bad commit
    s = sub.add_parser(
        "bisect-step",
        help="test HEAD for `git bisect run` (0/1/125)",
        description="The test for `git bisect run`: run the harness on the checkout's HEAD.",
        epilog=outcome.exit_help("bisect-step"),
        usage_exit=BisectStepExit.ABORT,
    )
    _add_common(s)
    s.add_argument(
        "--max-runs",
        type=options.positive_int,
        metavar="N",
        help="the most runs of one step before it answers skip (default 30)",
    )
    options.add_report_options(s, default=None)


def _options(args: argparse.Namespace) -> BisectOptions:
    if args.report_dir is None:  # bisect-step: never inside the checkout being bisected
        args.report_dir = cache_root() / "reports"
    return BisectOptions(
        run=options.run_options(args),
        good=getattr(args, "good", "") or "",
        bad=getattr(args, "bad", "") or "",
        expect=HAZARD if isinstance(args.expect, HazardExpect) else args.expect,
        location=args.location,
        repeat=args.repeat,
        repeat_cap=getattr(args, "repeat_cap", DEFAULT_REPEAT_CAP),
        confirm_fix=getattr(args, "confirm_fix", None),
        confidence=args.confidence,
        max_runs=getattr(args, "max_runs", None),
        budget_s=getattr(args, "budget", None),
    )


def command(args: argparse.Namespace) -> int:
    if args.command == "bisect-step":
        return _step(args)
    result = bisect(_options(args))
    print_summary(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    return result.exit_code


def _step(args: argparse.Namespace) -> int:
    # nothing may leave here as another code: 70 (a harness bug) would be "bad" to git
    try:
        opts = _options(args)
    except HarnessError as exc:  # e.g. a malformed --env: the user's error, abort
        print(f"harness bisect-step: error: {exc.message} (aborting)", file=sys.stderr)
        return BisectStepExit.ABORT
    except Exception:
        traceback.print_exc()
        print("harness bisect-step: internal error (aborting)", file=sys.stderr)
        return BisectStepExit.ABORT
    try:
        return bisect_step(opts)
    except Exception:  # a harness bug must stop git bisect run, not mark the commit bad
        traceback.print_exc()
        print("harness bisect-step: internal error (aborting)", file=sys.stderr)
        return BisectStepExit.ABORT
