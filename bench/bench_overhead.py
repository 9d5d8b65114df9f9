"""Harness overhead on trainer throughput: SPS of a bare run vs the same run under
`harness run`, alternated K times. Prints the medians and the ratio (target: < 2% loss).
SPS is the mean training throughput (agent_steps / uptime at the last epoch's first frame),
read the same way from both outputs.

    .venv/bin/python bench/bench_overhead.py [--pin replica] [--env breakout]
        [--variant fixed] [--steps 4194304] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import dashboard
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from harness.pipeline.stages import verify_prepare_build


def bare_sps(argv: list[str], cwd: Path, env: dict[str, str], parser: str) -> float:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=900, check=True)
    frames = dashboard.parse_text(parser, out.stdout.decode(errors="replace"))
    sps = dashboard.measured_sps(frames)
    assert sps is not None, "the bare run rendered no epoch"
    return sps


def harness_sps(args: argparse.Namespace, report_dir: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        args.env,
        "--pin",
        args.pin,
        "--variant",
        args.variant,
        "--steps",
        str(args.steps),
        "--report-dir",
        str(report_dir),
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, timeout=900)
    report = json.loads(out.stdout)
    return float(report["progress"]["measured_sps"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pin", default="replica")
    ap.add_argument("--env", default="breakout")
    ap.add_argument("--variant", default="fixed")
    ap.add_argument("--steps", type=int, default=4_194_304)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    pin = load_pin(args.pin)
    settings = load_scenario(args.env).settings(pin.lineage)
    built = verify_prepare_build(pin, settings.upstream_env, args.variant, None, False)
    tree = built.result.tree
    argv = shlex.split(pin.render_run(settings.upstream_env, args.steps, shlex.quote(str(tree))))
    argv += list(settings.args)
    env = {**os.environ, **pin.run_env, **settings.env}
    bare: list[float] = []
    under: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            t0 = time.monotonic()
            bare.append(bare_sps(argv, tree, env, pin.parser))
            under.append(harness_sps(args, Path(tmp) / str(i)))
            print(
                f"round {i + 1}: bare {bare[-1]:,.0f} SPS, harness {under[-1]:,.0f} SPS "
                f"({time.monotonic() - t0:.1f}s)"
            )
    b, h = statistics.median(bare), statistics.median(under)
    print(
        f"median SPS: bare {b:,.0f}, under the harness {h:,.0f}: "
        f"overhead {100 * (1 - h / b):+.2f}% (target < 2%)"
    )


if __name__ == "__main__":
    main()
