"""The repeat option group (`--repeat`, `--repeat-cap`, `--until-fail`, `--jobs`), defined
once for run, watch, compare and sweep, and how a repeated run ends on the terminal."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.options import positive_int
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.repeat import AUTO, DEFAULT_CAP, Repeat, parse_repeat
from harness.report import repeat as aggregate
from harness.report.matrix import print_matrix, write_matrix
from harness.report.runs import RunRow


def add_repeat_options(p: argparse.ArgumentParser, auto: bool = False, default: int = 1) -> None:
    what = "N or auto" if auto else "N"
    more = (
        "; auto: rounds until the decision is settled, at most --repeat-cap per variant"
        if auto
        else ""
    )
    p.add_argument(
        "--repeat",
        default=str(default) if default != 0 else AUTO,
        metavar=what,
        help=f"runs per cell (default {default if default else AUTO}): a rate with its 95%% "
        f"interval, every run's report kept{more}",
    )
    if auto:
        p.add_argument(
            "--repeat-cap",
            type=positive_int,
            default=DEFAULT_CAP,
            metavar="N",
            help=f"with --repeat auto: the most runs per variant (default {DEFAULT_CAP})",
        )
    p.add_argument(
        "--until-fail",
        action="store_true",
        help="stop a cell's runs at its first failure (at most --repeat runs)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="runs at once (default 1; parallel runs perturb timing-sensitive hangs)",
    )


def repeat_plan(args: argparse.Namespace, auto: bool = False) -> Repeat:
    runs, is_auto = parse_repeat(str(args.repeat), auto)
    if is_auto:
        if args.until_fail:
            raise HarnessError("--until-fail needs a number of runs, not --repeat auto", USAGE)
        return Repeat(args.repeat_cap, True, False, args.jobs)
    assert runs is not None
    return Repeat(runs, False, args.until_fail, args.jobs)


def finish_repeat(title: str, env: str | None, rows: list[RunRow], out: Path, as_json: bool) -> int:
    """repeat.json, repeat.md, index.html and report.html in `out`; the table, the rate and
    the groups on stdout (or the JSON); the exit code of what the runs found."""
    m = aggregate.repeat_matrix(title, env, rows, out)
    write_matrix(m, out, also_report_html=True)
    print_matrix(m, out, as_json)
    return aggregate.exit_code(rows)
