"""`harness compare ENV --variants stock,fixed`: one scenario per variant, side by side;
exit 0 only when the baseline reproduces a failure and every fix passes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness import outcome
from harness.cli import options
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import USAGE
from harness.pipeline.compare import compare_variants
from harness.report import github, markdown, store
from harness.report.html import IndexRow, relative_link, render_index

NAME = "compare"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="run one scenario for several variants, side by side",
        description="Run the scenario once per variant. The first variant is the baseline, "
        "expected to reproduce a failure; the fix is confirmed when it does and every other "
        "variant passes (exit 0; else 1).",
    )
    options.add_env_argument(p)
    p.add_argument(
        "--variants",
        default="stock,fixed",
        help="comma list; the first is the baseline expected to fail (default: stock,fixed)",
    )
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_watch_options(p)
    options.add_report_options(p)
    options.add_json_option(p, "compare.json (with the folder it is in)")


def command(args: argparse.Namespace) -> int:
    specs = [v.strip() for v in args.variants.split(",") if v.strip()]
    if len(specs) < 2:
        raise HarnessError("--variants needs at least two variants: a baseline and a fix", USAGE)
    rows, confirmed, why = compare_variants(options.run_options(args, specs[0]), specs)
    out = args.report_dir / store.new_run_id(f"compare-{args.env}")
    data = {
        "schema_version": 1,
        "env": args.env,
        "directory": str(out),
        "variants": [vars(r) for r in rows],
        "confirmed": confirmed,
        "summary": why,
    }
    atomic_write(out / "compare.json", json.dumps(data, indent=2) + "\n")
    table = markdown.table(
        ("variant", "verdict", "location", "epochs", "SPS", "failed checks", "why"),
        (
            (
                r.variant,
                r.kind,
                r.location,
                r.epochs,
                r.sps,
                ", ".join(r.checks_failed),
                r.reason,
            )
            for r in rows
        ),
    )
    reports = [f"- {r.variant}: {r.report_dir}" for r in rows if r.report_dir]
    atomic_write(
        out / "compare.md",
        "\n".join([f"# compare {args.env}", "", why, "", *table, "", "Reports:", "", *reports])
        + "\n",
    )
    index = [
        IndexRow(
            kind=r.kind,
            location=r.location,
            variant=r.variant,
            mechanism=r.mechanism,
            summary=r.reason,
            href=relative_link(Path(r.report_dir) / "report.html", out) if r.report_dir else None,
        )
        for r in rows
    ]
    atomic_write(out / "index.html", render_index(f"harness compare {args.env}: {why}", index))
    github.publish_table(
        f"harness compare {args.env}",
        ("variant", "verdict", "location", "why", "report"),
        [(r.variant, r.kind, r.location, r.reason, r.report_dir) for r in rows],
        why,
    )
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(table))
        print(why)
        print(f"report: {out}")
    if any(r.exit_code >= outcome.INTERRUPTED_BASE for r in rows):
        return rows[-1].exit_code
    return 0 if confirmed else 1
