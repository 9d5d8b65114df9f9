"""The repeat option group (`--repeat`, `--repeat-cap`, `--until-fail`, `--jobs`), defined
once for run, watch, compare and sweep, and how a repeated run ends on the terminal."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.options import positive_int
from harness.errors import HarnessError
from harness.outcome import USAGE

# the parser needs the two constants; the aggregate and its writers are imported when runs
# end (harness.cli.options says why)
from harness.pipeline.repeat import DEFAULT_CAP
from harness.vocab import AUTO

if TYPE_CHECKING:
    from harness.pipeline.repeat import Repeat, RunsInterrupted
    from harness.report.matrix import Matrix
    from harness.report.runs import RunRow


def add_repeat_options(
    p: argparse.ArgumentParser, auto: bool = False, default: int = 1, until_fail: bool = True
) -> None:
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
    if until_fail:  # not where a decision is taken on rates: they need a fixed n
        p.add_argument(
            "--until-fail",
            action="store_true",
            help="start no further run of a cell once one failed (at most --repeat runs; "
            "runs already started with --jobs finish)",
        )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="runs at once (default 1; parallel runs perturb timing-sensitive hangs)",
    )


def repeat_plan(args: argparse.Namespace, auto: bool = False) -> Repeat:
    from harness.pipeline.repeat import Repeat, parse_repeat

    runs, is_auto = parse_repeat(str(args.repeat), auto)
    until_fail = getattr(args, "until_fail", False)
    if is_auto:
        if until_fail:
            raise HarnessError("--until-fail needs a number of runs, not --repeat auto", USAGE)
        return Repeat(args.repeat_cap, True, False, args.jobs)
    assert runs is not None
    return Repeat(runs, False, until_fail, args.jobs)


def interrupted_note(exc: RunsInterrupted) -> str:
    return (
        f"interrupted by signal {exc.signum} after {exc.runs} finished run(s): the table holds them"
    )


def repeat_runs(
    title: str, env: str | None, out: Path, as_json: bool, runs: Callable[[], list[RunRow]]
) -> int:
    """`runs()`, then their aggregate (finish_repeat); interrupted, the aggregate of the runs
    that finished is written first, then the interrupt goes on to its exit code."""
    from harness.pipeline.repeat import RunsInterrupted
    from harness.report import repeat as aggregate
    from harness.report.matrix import write_matrix

    try:
        rows = runs()
    except RunsInterrupted as exc:
        if exc.rows:
            m = aggregate.repeat_matrix(title, env, exc.rows, out)
            m.conclusion.append(interrupted_note(exc))
            write_matrix(m, out, also_report_html=True)
        raise
    return finish_repeat(title, env, rows, out, as_json)


def write_partial(m: Matrix, exc: RunsInterrupted) -> None:
    """A multi-run table of what finished before an interrupt, in the command's folder."""
    from harness.report.matrix import write_matrix

    m.conclusion.append(interrupted_note(exc))
    write_matrix(m, exc.folder)


def finish_repeat(title: str, env: str | None, rows: list[RunRow], out: Path, as_json: bool) -> int:
    """repeat.json, repeat.md, index.html and report.html in `out`; the table, the rate and
    the groups on stdout (or the JSON); the exit code of what the runs found."""
    from harness.report import repeat as aggregate
    from harness.report.matrix import print_matrix, write_matrix

    m = aggregate.repeat_matrix(title, env, rows, out)
    write_matrix(m, out, also_report_html=True)
    print_matrix(m, out, as_json)
    return aggregate.exit_code(rows)
