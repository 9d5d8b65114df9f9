"""Cost of one bisect over a generated 32-commit history of the replica (tests/gitrepo.py):
steps, runs, builds and wall time of a first run (cold build cache) and of the same bisect
again (every build a cache hit). A benchmark, not a test: it prints, it does not assert.

    .venv/bin/python bench/bench_bisect.py [--commits 32] [--hang-at 21] [--startup 3]
        [--repeat 1] [--keep]

Everything (history, build cache, reports) lives in a temporary folder: the user's harness
cache is not touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.gitrepo

from harness import bisect as bis  # noqa: E402
from harness.pipeline.options import RunOptions  # noqa: E402
from tests.gitrepo import make_history, plan_with, write_scenario  # noqa: E402


def one(opts: bis.BisectOptions) -> tuple[bis.BisectResult, float]:
    start = time.monotonic()
    result = bis.bisect(opts)
    return result, time.monotonic() - start


def row(label: str, result: bis.BisectResult, wall: float) -> str:
    t = result.totals()
    runs = result.runs
    build_s = sum(r.build_s or 0 for r in runs if not r.cache_hit)
    run_s = sum(r.run_s or 0 for r in runs)
    return (
        f"{label:<8} {t['steps']:>5} {t['step_bound']:>5} {t['runs']:>4} {t['builds']:>6} "
        f"{t['cache_hits']:>10} {build_s:>8.1f} {run_s:>7.1f} {wall:>7.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=32, help="commits after the base (N)")
    ap.add_argument("--hang-at", type=int, default=21, help="which commit brings the hang")
    ap.add_argument("--startup", type=float, default=3.0, help="startup/stall window (s)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-bisect-"))
    os.environ["HARNESS_CACHE_DIR"] = str(work / "cache")
    try:
        history = make_history(work / "history", plan_with(args.commits, {args.hang_at: "hang"}))
        write_scenario(history.scenario, startup_s=args.startup, stall_s=args.startup)
        opts = bis.BisectOptions(
            run=RunOptions(
                env="breakout",
                pin=str(history.pin),
                checkout=history.root,
                scenario=str(history.scenario),
                report_dir=work / "reports",
            ),
            good=history.commits[0],
            bad=history.commits[-1],
            expect="hang",
            location="env_start",
            repeat=args.repeat,
        )
        cold, cold_s = one(opts)
        warm, warm_s = one(opts)
        first_bad = cold.first_bad.commit.subject if cold.first_bad else cold.message()
        print(f"history: {args.commits} commits after the base; first bad: {first_bad}")
        print("run      steps bound runs builds cache-hits build-s   run-s  wall-s")
        print(row("first", cold, cold_s))
        print(row("re-run", warm, warm_s))
        print(f"re-run / first wall time: {warm_s / cold_s:.2f}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
