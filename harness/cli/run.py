"""`harness run ENV`: build (cached) and run a scenario under the watchdog."""

from __future__ import annotations

import argparse
from typing import Any

from harness import outcome
from harness.cli import options, repeating

NAME = "run"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.verdict_help(),
        help="build and run an env under the watchdog",
        description="Build the pinned upstream (or a variant of it), run the scenario's "
        "trainer under the startup/stall/wall watchdog, sample every thread on a suspected "
        "hang, classify what happened, check the metrics and write a report.",
    )
    options.add_env_argument(p)
    options.add_scenario_options(p)
    options.add_source_options(p)
    options.add_watch_options(p)
    repeating.add_repeat_options(p)
    options.add_report_options(p)
    options.add_json_option(p)


def command(args: argparse.Namespace) -> int:
    from harness.cli.output import finish
    from harness.pipeline.repeat import repeat_run
    from harness.pipeline.run import run_env
    from harness.report import store

    plan = repeating.repeat_plan(args)
    opts = options.run_options(args)
    if not plan.repeated:
        return finish(run_env(opts), args.json)
    out = args.report_dir / store.new_run_id(f"repeat-{args.env}")
    title = f"harness run {args.env} --repeat {plan.describe()}"
    return repeating.repeat_runs(
        title, args.env, out, args.json, lambda: repeat_run(opts, plan, out)
    )
