"""`harness watch [options] -- CMD ...`: the same watchdog, sampling and verdict around any
command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness import outcome
from harness.cli import hostopts, options, repeating
from harness.watch.watchdog import DEFAULT_QUIESCENT_S

NAME = "watch"
DEFAULT_LIMIT_S = 600.0
DEFAULT_WINDOW_S = 60.0


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.verdict_help(),
        help="watch any command: harness watch [options] -- CMD ...",
        description="Run any command under the watchdog (default: startup and stall "
        f"{DEFAULT_WINDOW_S:g}s, wall {DEFAULT_LIMIT_S:g}s), sample its threads on a suspected "
        "hang and give a verdict and a report, as `harness run` does for a trainer.",
    )
    p.add_argument(
        "--parser",
        default="lines",
        help="how progress is read from the output: lines (any new line), puffer5, puffer3",
    )
    p.add_argument(
        "--cwd", type=Path, default=Path("."), help="the command's working folder (default: .)"
    )
    options.add_watch_options(p, trainer_args=False)
    repeating.add_repeat_options(p)
    options.add_report_options(p)
    options.add_json_option(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="the command and its arguments, after --")


def command(args: argparse.Namespace) -> int:
    from harness.cli.output import finish
    from harness.pipeline.options import WatchOptions
    from harness.pipeline.repeat import repeat_watch
    from harness.pipeline.run import watch_command
    from harness.report import store

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    hazards, expect = options.hazard_settings(args)
    opts = WatchOptions(
        argv=cmd,
        timeout_s=args.timeout or DEFAULT_LIMIT_S,
        startup_s=args.startup or DEFAULT_WINDOW_S,
        stall_s=args.stall or DEFAULT_WINDOW_S,
        quiescent_s=args.quiescent if args.quiescent is not None else DEFAULT_QUIESCENT_S,
        parser=args.parser,
        cwd=args.cwd,
        trainer_env=options.trainer_env(args),
        report_dir=args.report_dir,
        sampling=options.sampling(args),
        tee=args.tee,
        harness_argv=list(sys.argv),
        progress=options.progress(args, f"harness watch {Path(cmd[0]).name if cmd else ''}"),
        conditions=hostopts.host_conditions(args),
        hazards=hazards,
        expect_hazard=expect,
    )
    plan = repeating.repeat_plan(args)
    if not plan.repeated:
        return finish(watch_command(opts), args.json)
    name = Path(cmd[0]).name if cmd else "command"
    out = args.report_dir / store.new_run_id(f"repeat-{name}")
    title = f"harness watch {name} --repeat {plan.describe()}"
    return repeating.repeat_runs(title, None, out, args.json, lambda: repeat_watch(opts, plan, out))
