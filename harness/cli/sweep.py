"""`harness sweep ENV`: config knobs × environment × variants, one run per cell, a matrix of
verdicts and which knobs change the outcome. Exit 0 when every cell ran (whatever it
found), 1 when some cell could not run (its row says why), 5 when the sweep itself could
not run (bad knobs, unknown env or variant)."""

from __future__ import annotations

import argparse
from typing import Any

from harness import outcome
from harness.cli import options, repeating
from harness.filenames import table_json
from harness.vocab import TableKind

NAME = "sweep"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("sweep"),
        help="run a knob matrix (config × env × variants) and say which knobs matter",
        description="Run the scenario for each cell of the cartesian product of --set, "
        "--env, --variants and --host values (--repeat N times each), each run a normal "
        "`harness run` with its own report, then print the matrix of verdicts and, on the "
        "cells' rates, which knobs change the outcome, which are ruled out and which are "
        "unsettled.",
    )
    options.add_env_argument(p)
    options.add_knob_options(p)
    repeating.add_repeat_options(p, until_fail=False)
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_limit_options(p, per=" per cell")
    options.add_sampling_options(p)
    options.add_hazard_options(p)
    options.add_progress_options(p)
    options.add_report_options(p)
    options.add_json_option(p, table_json(TableKind.SWEEP))


def command(args: argparse.Namespace) -> int:
    from harness.pipeline.repeat import RunsInterrupted
    from harness.pipeline.sweep import SweepResult, conclude, parse_knobs, run_sweep
    from harness.report import store
    from harness.report.matrix import print_matrix, write_matrix

    knobs = parse_knobs(args.sets, args.env_knobs, args.variants, args.host_knob)
    plan = repeating.repeat_plan(args)
    args.env_vars, args.trainer_args, args.variant = [], [], "stock"
    out = args.report_dir / store.new_run_id(f"sweep-{args.env}")
    try:
        result = run_sweep(options.run_options(args), knobs, out, plan)
    except RunsInterrupted as exc:  # the cells that finished, judged, then the exit code
        if exc.rows:
            partial = SweepResult(args.env, knobs, exc.rows, out)
            partial.conclusion = conclude(knobs, exc.rows)
            repeating.write_partial(partial.matrix(), exc)
        raise
    matrix = result.matrix()
    write_matrix(matrix, out)
    print_matrix(matrix, out, args.json)
    return result.exit_code
