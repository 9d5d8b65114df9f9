"""`harness probe ENV`: step an env header with random actions and check its reward bounds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness import outcome
from harness.cli import options
from harness.cli.output import check_mark
from harness.outcome import ProbeExit

NAME = "probe"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("probe"),
        help="step an env header with random actions: reward bounds",
        description="Compile our probe driver against the (variant's) env header, step "
        "many envs with random actions and check raw and clamped rewards against the "
        "scenario's bounds.",
    )
    options.add_env_argument(p)
    p.add_argument(
        "--steps", type=options.positive_int, default=20000, help="steps per env (default 20000)"
    )
    p.add_argument(
        "--envs", type=options.positive_int, default=64, help="number of envs (default 64)"
    )
    p.add_argument("--seed", type=int, default=1, help="random seed of the actions (default 1)")
    options.add_json_option(p, "the probe's data and checks as JSON")
    options.add_source_options(p)


def command(args: argparse.Namespace) -> int:
    """Exit 0 when the probe's rewards are within the scenario's bounds, 1 when not."""
    from harness.pipeline.probe import probe_env

    res = probe_env(
        args.env, args.pin, args.variant, args.checkout, args.steps, args.envs, args.seed
    )
    if args.json:
        print(json.dumps({"probe": res.data, "checks": [vars(c) for c in res.checks]}, indent=2))
        return ProbeExit.PASSED if res.ok else ProbeExit.FAILED
    d = res.data
    print(
        f"harness probe {res.env}: {d['num_envs']} envs x {d['steps']} steps "
        f"= {d['samples']} env steps, "
        f"{d['episodes']:g} episodes, terminal rate {d['terminal_rate']:.4f}"
    )
    print(
        f"  raw reward     [{d['raw_min']:g}, {d['raw_max']:g}] "
        f"(declared [{d['declared_min']:g}, {d['declared_max']:g}], "
        f"{d['above_one']} steps with |r| > 1)"
    )
    print(f"  clamped reward [{d['clamped_min']:g}, {d['clamped_max']:g}]")
    print("  log means      " + ", ".join(f"{k} {v:.4g}" for k, v in d["log"].items()))
    for c in res.checks:
        print(
            f"  {check_mark(c.status)} {c.name}: {c.observed} in {c.bound}"
            + (f" ({c.message})" if c.message else "")
        )
    return ProbeExit.PASSED if res.ok else ProbeExit.FAILED
