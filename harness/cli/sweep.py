"""`harness sweep ENV`: config knobs × environment × variants, one run per cell, a matrix of
verdicts and which knobs change the outcome. Exit 0 when every cell ran (whatever it
found), 1 when some cell could not run (its row says why), 5 when the sweep itself could
not run (bad knobs, unknown env or variant)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness import outcome
from harness.cli import options
from harness.files import atomic_write
from harness.pipeline.sweep import Cell, parse_knobs, run_sweep
from harness.report import github, markdown, store
from harness.report.html import IndexRow, relative_link, render_index

NAME = "sweep"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="run a knob matrix (config × env × variants) and say which knobs matter",
        description="Run the scenario once per cell of the cartesian product of --set, "
        "--env and --variants values, each cell a normal `harness run` with its own report, "
        "then print the matrix of verdicts and which knobs change the outcome. Exits 0 when "
        "every cell ran, whatever it found; 1 when some cell could not run; 5 when the sweep "
        "could not run.",
    )
    options.add_env_argument(p)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=V1,V2",
        dest="sets",
        help="a trainer config knob and its values, passed as --section.key=value (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        dest="env_knobs",
        help="an environment variable of the trainer and its values, e.g. "
        "OMP_WAIT_POLICY=active,passive (repeatable)",
    )
    p.add_argument(
        "--variants", help="comma list of variants, e.g. stock,omp-free (a build per variant)"
    )
    p.add_argument(
        "--jobs",
        type=options.positive_int,
        default=1,
        help="cells run at once (default 1; parallel runs perturb timing-sensitive hangs)",
    )
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_limit_options(p, per=" per cell")
    options.add_sampling_options(p)
    options.add_report_options(p)
    options.add_json_option(p, "sweep.json")


def _row(cell: Cell, labels: list[str]) -> list[object]:
    return [
        *(cell.values[label] for label in labels),
        cell.kind,
        cell.location,
        cell.summary if cell.kind == "error" else "",
        cell.report_dir,
    ]


def command(args: argparse.Namespace) -> int:
    knobs = parse_knobs(args.sets, args.env_knobs, args.variants)
    args.env_vars, args.trainer_args, args.variant = [], [], "stock"
    base = options.run_options(args)
    out = args.report_dir / store.new_run_id(f"sweep-{args.env}")
    total = 1
    for k in knobs:
        total *= len(k.values)
    err = Console(file=sys.stderr, highlight=False)

    def progress(cell: Cell, done: int) -> None:
        where = f" in {cell.location}" if cell.location else ""
        shown = ", ".join(f"{k}={v}" for k, v in cell.values.items())
        err.print(f"harness sweep: cell {done}/{total} ({shown}) → {cell.kind}{where}")

    result = run_sweep(base, knobs, out, args.jobs, progress)
    labels = [k.label for k in knobs]
    headers = [*labels, "verdict", "location", "why", "report"]
    rows = [_row(c, labels) for c in result.cells]
    atomic_write(out / "sweep.json", json.dumps(result.to_json(), indent=2) + "\n")
    lines = [f"# harness sweep: {args.env}", "", *[f"- {c}" for c in result.conclusion], ""]
    atomic_write(out / "sweep.md", "\n".join([*lines, *markdown.table(headers, rows)]) + "\n")
    index = [
        IndexRow(
            kind=c.kind,
            location=c.location,
            variant=c.variant,
            cell=", ".join(f"{k}={v}" for k, v in c.values.items() if k != "variant"),
            summary=c.summary,
            href=relative_link(Path(c.report_dir) / "report.html", out) if c.report_dir else None,
        )
        for c in result.cells
    ]
    atomic_write(out / "index.html", render_index(f"harness sweep {args.env}", index))
    github.publish_table(f"harness sweep {args.env}", headers, rows, "; ".join(result.conclusion))
    if args.json:
        print(json.dumps({**result.to_json(), "directory": str(out)}, indent=2))
    else:
        table = Table(*headers[:-1], title=f"harness sweep: {args.env}")
        for cell, row in zip(result.cells, rows, strict=True):
            kind = f"[{outcome.style(cell.kind)}]{cell.kind}[/]"
            table.add_row(
                *[str(v) for v in row[: len(labels)]],
                kind,
                *(str(v or "") for v in row[len(labels) + 1 : -1]),
            )
        Console(highlight=False).print(table)
        for line in result.conclusion:
            print(line)
        print(f"report: {out}")
    return 1 if any(c.kind in ("error", "not run") for c in result.cells) else 0
