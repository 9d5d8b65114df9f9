"""`harness compare ENV [--variants stock,fixed]`: one scenario per variant, side by side;
exit 0 only when the baseline reproduces a failure and every fix passes."""

from __future__ import annotations

import argparse
from typing import Any

from harness import outcome
from harness.cli import options, repeating
from harness.config.defaults import compare_baseline

NAME = "compare"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("compare"),
        help="run one scenario for several variants, side by side",
        description="Run the scenario for each variant, each run a child harness with its "
        "own report. The first variant is the baseline, expected to reproduce a failure; the "
        "fix is confirmed when it does and each other variant's failure rate "
        "is below the baseline's at 95% (upper bound under lower bound). By default "
        "(--repeat auto) runs are added in rounds until that is settled or the cap is hit.",
    )
    options.add_env_argument(p)
    p.add_argument(
        "--variants",
        help="comma list; the first is the baseline expected to fail (default: the baseline "
        f"({compare_baseline()}) then the pin's fixes)",
    )
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_watch_options(p)
    repeating.add_repeat_options(p, auto=True, default=0, until_fail=False)
    options.add_report_options(p)
    options.add_json_option(p, "compare.json (with the folder it is in)")


def command(args: argparse.Namespace) -> int:
    from harness.pipeline.compare import CompareResult, compare_variants
    from harness.pipeline.decide import judge_compare
    from harness.pipeline.repeat import RunsInterrupted
    from harness.report import store
    from harness.report.matrix import print_matrix, write_matrix

    specs = None
    if args.variants is not None:
        specs = [v.strip() for v in args.variants.split(",") if v.strip()]
    plan = repeating.repeat_plan(args, auto=True)
    base = options.run_options(args, specs[0] if specs else compare_baseline())
    out = args.report_dir / store.new_run_id(f"compare-{args.env}")
    try:
        result = compare_variants(base, specs, out, plan)
    except RunsInterrupted as exc:  # the variants' runs so far, judged, then the exit code
        if exc.rows:
            partial = CompareResult(args.env, exc.rows, judge_compare(exc.rows), plan)
            repeating.write_partial(partial.matrix(), exc)
        raise
    matrix = result.matrix()
    write_matrix(matrix, out)
    print_matrix(matrix, out, args.json)
    return result.exit_code
