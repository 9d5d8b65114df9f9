"""`harness attach PID`: diagnose a process tree that is running now, one the harness did
not start (a training hung in a tmux, a CI step silent for 40 minutes)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness import outcome
from harness.cli import options
from harness.cli.output import finish
from harness.watch.watchdog import DEFAULT_QUIESCENT_S

NAME = "attach"
DEFAULT_DURATION_S = 10.0


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.verdict_help(),
        help="diagnose a running process and its descendants: harness attach PID",
        description="Watch a running process tree for up to --duration seconds (stopping "
        "early once it is quiescent: every thread blocked on the tree), sample its stacks, "
        "classify, give causes and write a report folder, as `harness watch` does, without "
        "launching anything. The target is never stopped or signalled unless --kill is "
        "given. Where ptrace is refused, the report is what /proc gives and one line says "
        "what would allow stacks. Exit codes as `harness watch` (2 hang, 6 the tree kept "
        "writing: no hang seen, 8 the process exited while watched, 5 a pid not visible here).",
    )
    p.add_argument("pid", type=options.positive_int, help="the process to diagnose (its tree too)")
    p.add_argument(
        "--duration",
        type=options.positive_seconds,
        default=DEFAULT_DURATION_S,
        metavar="SECONDS",
        help=f"watch at most this long (default {DEFAULT_DURATION_S:g}); a quiescent tree "
        "ends the watch early",
    )
    p.add_argument(
        "--quiescent",
        type=options.non_negative_seconds,
        default=DEFAULT_QUIESCENT_S,
        metavar="SECONDS",
        help="a deadlock once every thread has been blocked on the tree this long (default "
        f"{DEFAULT_QUIESCENT_S:g}; 0: off, judge at the end of --duration)",
    )
    p.add_argument(
        "--kill",
        action="store_true",
        help="after the report, SIGKILL the process and its descendants",
    )
    options.add_stack_tool_options(p)
    options.add_progress_options(p)
    options.add_report_options(p)
    options.add_json_option(p)


def command(args: argparse.Namespace) -> int:
    from harness.execute.runner import SampleOptions
    from harness.pipeline.attach import AttachOptions, attach_command

    opts = AttachOptions(
        pid=args.pid,
        duration_s=args.duration,
        quiescent_s=args.quiescent,
        report_dir=args.report_dir,
        sampling=SampleOptions(snapshots=1, native=args.native, python=args.python_stacks),
        kill=args.kill,
        harness_argv=list(sys.argv),
        progress=options.progress(args, f"harness attach {args.pid}"),
    )
    return finish(attach_command(opts), args.json)
