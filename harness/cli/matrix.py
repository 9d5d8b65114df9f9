"""`harness matrix ENV`: the runs a sweep or a repeat would make, printed as a GitHub
Actions `strategy.matrix` (JSON on stdout, one line: `{"include": [...]}`), each entry with
the one `harness run` command its job runs and the folder its report goes to
(docs/matrix.md). Exit 0 with the plan; 5 when it cannot be planned (bad knobs, an unknown
env, variant or host profile, more than 256 jobs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.cli import options, repeating
from harness.pipeline.fanout import MAX_JOBS, plan_matrix
from harness.pipeline.sweep import parse_knobs

NAME = "matrix"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="print a sweep's or a repeat's runs as a GitHub Actions job matrix (JSON)",
        description="Plan the runs a `harness sweep` (or a `--repeat`) would make, one per "
        "cell and repeat, and print them as a GitHub Actions strategy.matrix: "
        '{"include": [{"id", "cell", "run", "command", "report_dir", "timeout_minutes"}, '
        "…]}, one line of JSON on stdout. Each job runs its entry's command (a `harness run` "
        "reporting into --report-dir/ID) and uploads that folder; `harness collect` tells "
        f"the downloaded folders together. At most {MAX_JOBS} entries (GitHub's limit per "
        "matrix). Exits 0 with the plan, 5 when it cannot be planned.",
    )
    options.add_env_argument(p)
    options.add_knob_options(p)
    repeating.add_repeat_options(p)
    options.add_scenario_options(p)
    options.add_source_options(p, variant=False)
    options.add_limit_options(p, per=" per run")
    options.add_sampling_options(p)
    options.add_hazard_options(p)
    options.add_report_options(p)


def command(args: argparse.Namespace) -> int:
    sets, envs, variant_list, hosts = args.sets, args.env_knobs, args.variants, args.host_knob
    given = sets or envs or variant_list is not None or hosts is not None
    knobs = parse_knobs(sets, envs, variant_list, hosts) if given else []
    plan = repeating.repeat_plan(args)
    # the knobs are the cells' own; the base is a plain stock run, as a sweep's is
    args.env_vars, args.trainer_args, args.variant, args.quiet = [], [], "stock", True
    fan = plan_matrix(options.run_options(args), knobs, plan, args.report_dir)
    print(json.dumps(fan.to_json(), separators=(",", ":")))
    print(fan.describe(), file=sys.stderr)
    return 0
