"""The posterior bisect on real git repositories whose test really hangs, side by side with
git-bayesect 1.2 (PyPI, installed by this script into a folder of its own) on the same
repositories: each trial makes a history of the two-lock race program (tests/
test_bisect_flaky.py: a C program whose bad commits deadlock in pthread_mutex_lock in about
two runs of three, through real thread timing), with the bad commit drawn at random, and
bisects it with both tools.

    .venv/bin/python bench/bisect_real.py [--trials 10] [--commits 16] [--timeout 5]

The harness: `harness bisect` with its defaults (the posterior search to 0.95), each run
built (cached) and watched, a deadlock called after 0.5 s of every thread blocked. git-
bayesect: `git bayesect start` and `git bayesect run` in a clone, its test a shell line that
builds the program and runs it under `timeout --timeout` (a deadlock is a failure when the
timeout kills it: a hang costs the whole timeout, as it does for anyone without a hang
detector). Reported per tool: right (the named commit is the one that brought the race),
mean and p95 runs, mean wall time, mean stated confidence.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.*

from harness import bisect as bis  # noqa: E402
from tests.test_bisect_flaky import ROUNDS, flaky_options, make_race_history  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
# the same pinned git-bayesect, installed the same way, as the simulation's
from bench_bisect_posterior import install_bayesect  # noqa: E402


def harness_trial(h: Any, out: Path) -> tuple[bool, int, float, float]:
    start = time.monotonic()
    r = bis.bisect(flaky_options(h, out))
    wall = time.monotonic() - start
    right = r.first_bad is not None and r.first_bad.commit.sha == h.first_bad
    p = r.posterior.probability if r.posterior is not None else 0.0
    return right, len(r.runs), wall, p


def bayesect_trial(
    h: Any, work: Path, timeout: float, site: Path
) -> tuple[bool, int, float, float]:
    gb = importlib.import_module("git_bayesect")  # installed by install_bayesect

    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(h.root), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    test = f"gcc -O0 -g -pthread -o race race.c && timeout {timeout:g} ./race {ROUNDS}"
    git_bayesect = [sys.executable, "-m", "git_bayesect"]
    start = time.monotonic()
    subprocess.run(
        [*git_bayesect, "start", "--old", h.commits[0], "--new", h.commits[-1]],
        cwd=clone,
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*git_bayesect, "run", "sh", "-c", test],
        cwd=clone,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.monotonic() - start
    cwd = Path.cwd()
    os.chdir(clone)
    try:
        state = gb.State.from_git_state(clone)
        b = gb.get_bisector(state)
        dist = b.distribution
        top = int(dist.argmax())
        new_index = state.commit_indices[state.new_sha]
        named = {i: c for c, i in state.commit_indices.items()}[new_index - top].decode()
        runs = len(state.results)
    finally:
        os.chdir(cwd)
    return named == h.first_bad, runs, wall, float(dist[top])


def summary(rows: list[tuple[bool, int, float, float]]) -> str:
    runs = sorted(r[1] for r in rows)
    p95 = runs[max(0, math.ceil(0.95 * len(runs)) - 1)]
    wall = statistics.mean(r[2] for r in rows)
    stated = 100 * statistics.mean(r[3] for r in rows)
    right = sum(r[0] for r in rows)
    return (
        f"{right}/{len(rows)} | {statistics.mean(runs):.1f} | {p95} | {wall:.0f} s | {stated:.1f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=5.0, help="git-bayesect's test timeout")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-bisect-real-"))
    os.environ["HARNESS_CACHE_DIR"] = str(work / "cache")
    site = work / "site"
    install_bayesect(site)
    results: dict[str, list[tuple[bool, int, float, float]]] = {"harness": [], "git-bayesect": []}
    try:
        for t in range(args.trials):
            bad_at = random.Random(t).randint(1, args.commits)
            trial = work / f"t{t}"
            h = make_race_history(trial, commits=args.commits, bad_at=bad_at, rounds=ROUNDS)
            results["harness"].append(harness_trial(h, trial / "reports"))
            results["git-bayesect"].append(bayesect_trial(h, trial, args.timeout, site))
            print(
                f"trial {t}: bad at {bad_at}: harness {results['harness'][-1]}, "
                f"git-bayesect {results['git-bayesect'][-1]}",
                file=sys.stderr,
                flush=True,
            )
        print(f"N = {args.commits}, {args.trials} repositories, the race (~2/3 of bad runs hang)")
        print("| tool | right | runs (mean) | runs (p95) | wall (mean) | stated |")
        print("|---|---|---|---|---|---|")
        for tool, rows in results.items():
            print(f"| {tool} | {summary(rows)} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
