"""Time to verdict on the stock replica's real hang: launch → verdict, against the startup
window, and how long sampling took (snapshots + stacks). Prints one line per round.

    .venv/bin/python bench/bench_time_to_verdict.py [--startup 5] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--startup", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--native", default="auto")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            cmd = [
                sys.executable,
                "-m",
                "harness",
                "run",
                "breakout",
                "--startup",
                str(args.startup),
                "--native",
                args.native,
                "--report-dir",
                str(Path(tmp) / str(i)),
                "--json",
            ]
            out = subprocess.run(cmd, capture_output=True, timeout=300)
            r = json.loads(out.stdout)
            t = r["timings"]
            print(
                f"round {i + 1}: verdict {r['verdict']['kind']} in {r['verdict']['location']} "
                f"after {t['run_s']:.2f}s (startup window {args.startup:g}s, "
                f"sampling {t['sampling_s']:.2f}s: "
                f"{t['run_s'] - args.startup:.2f}s past the window)"
            )


if __name__ == "__main__":
    main()
