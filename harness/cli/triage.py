"""`harness triage ENV`: reproduce, explain, rule knobs out, try the fixes, find the commit,
within a time budget, told as one report (docs/triage.md). Exits 0 when a failure was
reproduced and a fix confirmed, 1 when reproduced without a confirmed fix, 7 when nothing
failed here, 5 on bad input, 128 + N when interrupted (triage.json then keeps the finished
steps: `--resume DIR` goes on)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness import outcome
from harness.cli import options
from harness.cli.options import positive_int
from harness.errors import HarnessError, Interrupted
from harness.filenames import ISSUE_MD, TRIAGE_HTML, TRIAGE_JSON
from harness.pipeline.repeat import DEFAULT_CAP
from harness.report import github
from harness.text import markdown_text, terminal_safe
from harness.triage.budget import DEFAULT_BUDGET_S, parse_budget
from harness.triage.model import TriageOptions, TriageResult
from harness.triage.run import exit_code, run_triage
from harness.vocab import StepStatus, TriageStep

NAME = "triage"


def _budget(text: str) -> float:
    try:
        return parse_budget(text)
    except HarnessError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("triage"),
        help="the whole investigation in one command: reproduce, explain, knobs, fixes, history",
        description="Reproduce the failure with the stock variant (repeated until a rate can "
        "be stated; under the pin's host profiles where it does not fail here), explain it "
        "from the first failing run (verdict, place, cause, who waits for whom, the doctor's "
        "facts), try the pin's fixes, sweep the candidate knobs one at a time and, for git "
        "sources, find the first bad commit; most informative step first, each skipped with "
        "its reason when it does not fit the --budget. Writes triage.json (after every "
        "step), triage.html and issue.md.",
    )
    options.add_env_argument(p)
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_watch_options(p, per=" per run")
    options.add_report_options(p)
    options.add_json_option(p, TRIAGE_JSON)
    g = p.add_argument_group("triage")
    g.add_argument(
        "--budget",
        type=_budget,
        default=DEFAULT_BUDGET_S,
        metavar="TIME",
        help="the whole triage: seconds or a duration (900, 15m, 1h30m; default 15m); a "
        "step that does not fit is skipped with its reason",
    )
    g.add_argument("--good", metavar="COMMIT", help="a known-good commit: History bisects from it")
    g.add_argument(
        "--bad", metavar="COMMIT", help="the bad end of History (default: the pin's commit)"
    )
    g.add_argument(
        "--repeat-cap",
        type=positive_int,
        default=DEFAULT_CAP,
        metavar="N",
        help=f"the most runs per cell where a step repeats (default {DEFAULT_CAP})",
    )
    g.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="runs at once (default 1; parallel runs perturb timing-sensitive hangs)",
    )
    g.add_argument(
        "--skip",
        type=_steps,
        default=frozenset(),
        metavar="STEP,…",
        help="steps not to take: explain, knobs, fixes, history (reproduce cannot be skipped)",
    )
    g.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the triage in DIR (its triage.json): finished steps are kept",
    )


def _steps(text: str) -> frozenset[TriageStep]:
    """`knobs,history` → those steps; an unknown name or `reproduce` is a usage error."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = [s.value for s in TriageStep if s is not TriageStep.REPRODUCE]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"--skip takes steps among {', '.join(known)}, not {text!r}"
        )
    return frozenset(TriageStep(n) for n in names)


def command(args: argparse.Namespace) -> int:
    args.variant = "stock"
    # hazards on by default: a triage that cannot reproduce still says (and bisects) them
    run = options.run_options(args, hazards_default=True)
    opts = TriageOptions(
        run=run,
        budget_s=args.budget,
        good=args.good,
        bad=args.bad,
        repeat_cap=args.repeat_cap,
        jobs=args.jobs,
        resume=args.resume,
        skip=args.skip,
    )
    try:
        result = run_triage(opts)
    except Interrupted as exc:  # triage.json keeps the finished steps: say how to go on
        where = (
            str(args.resume)
            if args.resume is not None
            else f"the newest triage folder under {run.report_dir}"
        )
        print(
            f"harness: triage interrupted by signal {exc.signum}; the finished steps are in "
            f"{TRIAGE_JSON} of {where}: go on with --resume DIR",
            file=sys.stderr,
        )
        return outcome.interrupted_code(exc.signum)
    code = exit_code(result)
    _print(result, args.json)
    _publish(result, code)
    return code


def _print(result: TriageResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        out = sys.stderr
    else:
        out = sys.stdout
    lines = [f"harness triage {result.env}: {headline(result)}"]
    for s in result.steps:
        shown = s.headline if s.status is StepStatus.DONE else f"{s.status}: {s.reason}"
        cost = f" [{s.duration_s:.0f} s]" if s.duration_s is not None else ""
        lines.append(f"  {s.name:<10} {shown}{cost}")
    lines += [f"  $ {c}" for c in result.commands]
    lines.append(f"triage: {result.directory / TRIAGE_JSON}")
    for name in (TRIAGE_HTML, ISSUE_MD):
        if (result.directory / name).is_file():
            lines.append(f"{name + ':':<7} {result.directory / name}")
    print("\n".join(terminal_safe(ln) for ln in lines), file=out, flush=True)


def headline(result: TriageResult) -> str:
    """One sentence for people and for CI's step summary."""
    if not result.reproduced:
        return "not reproduced here"
    repro = next(s for s in result.steps if s.name == TriageStep.REPRODUCE)
    said = f"reproduced: {repro.headline}"
    if result.fix_confirmed:
        said += f"; fixed by {result.fix_confirmed}"
    else:
        said += "; no fix confirmed"
    if result.first_bad:
        said += f"; first bad commit {result.first_bad[:12]}"
    return said


def _publish(result: TriageResult, code: int) -> None:
    """Under GitHub Actions: the headline and where triage.html is, in the step summary."""
    if not github.active():
        return
    html = result.directory / TRIAGE_HTML
    where = html if html.is_file() else result.directory / TRIAGE_JSON
    text = (
        f"### harness triage {markdown_text(result.env)} → "
        f"**{markdown_text(headline(result))}** (exit {code})\n\n"
        + "".join(f"- {markdown_text(line)}\n" for line in result.conclusion)
        + f"\nreport: `{markdown_text(str(where))}`\n\n"
    )
    github.append_summary(text)
