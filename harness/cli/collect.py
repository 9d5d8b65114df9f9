"""`harness collect DIR…`: run report folders made elsewhere (a CI matrix's downloaded
artifacts, separate `harness run`/`watch` processes) told together as a local `--repeat` or
`sweep` tells its own runs (docs/matrix.md). Exit codes: one cell, as `--repeat` (0 every
run passed, else the code of the failure seen most often); several cells, as `sweep` (0 when
every cell ran, 1 when some could not); 5 when nothing can be collected (a missing folder,
no report found, a report this harness cannot read, a link out of a folder)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli import options
from harness.pipeline.collect import MAX_DEPTH, MAX_REPORTS, collect, tell
from harness.report import store
from harness.report.matrix import print_matrix

NAME = "collect"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="tell run reports made elsewhere (CI matrix jobs) together, like a local "
        "--repeat or sweep",
        description="Find the run report folders under each DIR (at most "
        f"{MAX_DEPTH} levels deep, {MAX_REPORTS} reports; no link followed), infer each "
        "run's cell from its report (variant, trainer environment, --section.key=value "
        "arguments, host profile) and write what a local run would: one cell → repeat.json "
        "(runs, counts, hang rate with its 95% interval, failure groups); several → "
        "sweep.json with each knob judged on the cells' rates; with repeat.md/sweep.md, "
        "index.html and the GitHub step summary. Exits as --repeat (one cell) or sweep "
        "(several) would; 5 when nothing can be collected.",
    )
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="folders holding run reports")
    options.add_report_options(p)
    options.add_json_option(p, "repeat.json or sweep.json")


def command(args: argparse.Namespace) -> int:
    store.check_report_dir(args.report_dir)
    found = collect(args.dirs)
    out = args.report_dir / store.new_run_id(f"collect-{found.what}")
    matrix, code = tell(found, out)
    print_matrix(matrix, out, args.json)
    return code
