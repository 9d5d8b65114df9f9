"""`harness doctor`: probe this platform (tools, OpenMP after fork, ptrace, NVML, CUDA)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness import outcome
from harness.cli import options

NAME = "doctor"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        epilog=outcome.exit_help("doctor"),
        help="probe this platform: tools, OpenMP (after fork), ptrace, NVML, CUDA",
        description="Probe what the harness and the trainer need from this host, each probe "
        "with its own timeout.",
    )
    options.add_json_option(p, "the probes as JSON")
    p.add_argument(
        "--timeout",
        type=options.positive_seconds,
        default=10.0,
        help="seconds per probe (default 10)",
    )


def command(args: argparse.Namespace) -> int:
    from harness import doctor

    probes = doctor.run_doctor(args.timeout)
    if args.json:
        print(json.dumps(doctor.to_json(probes), indent=2))
    else:
        print(doctor.render(probes), end="")
    return doctor.exit_code(probes)
