"""The posterior bisect of an intermittent failure, side by side with git-bayesect 1.2 (PyPI
`git-bayesect`, installed by this script into a folder of its own, never vendored), in
simulation over both tools' own search code: the same histories, the same true first bad
commit, and common random numbers (the r-th run of a commit draws the same uniform number
in both tools), so that the two differ only by how they choose and when they stop.

    .venv/bin/python bench/bench_bisect_posterior.py [--trials 300] [--n 64 128]
        [--setting 90/10 ...] [--jobs 2] [--json FILE] [--smoke]

A setting "A/B" is: a bad commit (the first bad one and after) fails with chance A%, a good
one with chance B%, with the same signature; "A/B*" gives the good commits' failures
another signature (a crash where the bad ones hang): the harness tells them apart, while
git-bayesect sees a failure either way. "100/0" is the deterministic case. Each trial
draws the first bad commit uniformly among the N candidates; the good end is position 0.

The harness runs `harness.bisect.posterior` exactly as `harness bisect` does (its first run
at the bad end, then `choose`, stop at --confidence 0.95), with every run costing the same
(runs are what is compared here; bench/README.md has the real repositories' wall times).
git-bayesect runs its `Bisector` (Jeffreys priors, next commit by expected entropy, stop at
0.95 posterior, as `git bayesect run` does). Reported per tool: right % (the named commit
is the true first bad one), mean and p95 runs, stated confidence (mean of what it said when
it stopped) and measured (right %), the wall time of the simulation.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bisect import posterior as post  # noqa: E402

GIT_BAYESECT = "git-bayesect==1.2"
SETTINGS = ("100/0", "90/10", "90/10*", "50/0", "30/0", "10/0")
CONFIDENCE = 0.95
MAX_RUNS = 3000  # a trial that has not stopped by then counts as a miss


@dataclass(frozen=True)
class Setting:
    bad: float  # a bad commit's failure chance
    good: float  # a good commit's failure chance
    other: bool  # the good commits' failures have another signature

    @classmethod
    def parse(cls, text: str) -> Setting:
        other = text.endswith("*")
        a, b = text.rstrip("*").split("/")
        return cls(int(a) / 100, int(b) / 100, other)


class Draws:
    """Common random numbers: the r-th run of position j in trial t draws the same number
    for every tool."""

    def __init__(self, trial: int) -> None:
        self.trial = trial
        self.streams: dict[int, random.Random] = {}
        self.drawn: dict[int, list[float]] = {}

    def draw(self, position: int, r: int) -> float:
        seq = self.drawn.setdefault(position, [])
        rng = self.streams.setdefault(position, random.Random(self.trial * 1_000_003 + position))
        while len(seq) <= r:
            seq.append(rng.random())
        return seq[r]


def outcome(s: Setting, first_bad: int, position: int, u: float) -> int:
    if position >= first_bad:
        return post.SOUGHT if u < s.bad else post.PASS
    if u < s.good:
        return post.OTHER if s.other else post.SOUGHT
    return post.PASS


def harness_trial(
    s: Setting, n: int, trial: int, priors: post.Priors | None = None
) -> tuple[bool, int, float]:
    rng = random.Random(trial)
    first_bad = rng.randint(1, n)
    draws = Draws(trial)
    model = post.Model(n + 1, priors or post.Priors())
    costs = post.Costs()
    seen = [0] * (n + 1)
    position: int | None = n  # the bad end first, as harness bisect does
    while True:
        assert position is not None
        o = outcome(s, first_bad, position, draws.draw(position, seen[position]))
        seen[position] += 1
        model.add(position, o)
        costs.add(o, 1.0, None)
        p = model.posterior()
        k, pk = post.best(p)
        if pk >= CONFIDENCE or model.runs >= MAX_RUNS:
            return k == first_bad and pk >= CONFIDENCE, model.runs, pk
        if post.not_reproduced(model) or post.no_change(model, CONFIDENCE):
            return False, model.runs, pk  # adaptive.py's other stops: no commit named
        position = post.choose(model, p, costs)
        if position is None:
            return False, model.runs, pk


def bayesect_trial(s: Setting, n: int, trial: int) -> tuple[bool, int, float]:
    gb = importlib.import_module("git_bayesect")
    import numpy as np

    rng = random.Random(trial)
    first_bad = rng.randint(1, n)
    draws = Draws(trial)
    # git-bayesect's indices run newest first: index i is our position n - i; its B says
    # "index <= B is new (bad)", so B = n - first_bad
    b = gb.Bisector(np.ones(n + 1))
    seen = [0] * (n + 1)
    runs = 0
    index = 0  # the bad end first, as for the harness
    while True:
        position = n - index
        o = outcome(s, first_bad, position, draws.draw(position, seen[position]))
        seen[position] += 1
        runs += 1
        b.record(index, o != post.PASS)  # a failure is a failure: it sees no signature
        dist = b.distribution
        top = int(np.argmax(dist))
        if dist[top] >= CONFIDENCE or runs >= MAX_RUNS:
            right = n - top == first_bad and dist[top] >= CONFIDENCE
            return right, runs, float(dist[top])
        index = b.select()


def _run(args: tuple[str, str, int, int]) -> tuple[bool, int, float]:
    tool, setting, n, trial = args
    fn: Callable[[Setting, int, int], tuple[bool, int, float]] = (
        harness_trial if tool == "harness" else bayesect_trial
    )
    return fn(Setting.parse(setting), n, trial)


def install_bayesect(where: Path) -> None:
    """git-bayesect from PyPI into a folder of its own (numpy and scipy from the venv)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(where),
            GIT_BAYESECT,
        ],
        check=True,
        timeout=300,
    )
    sys.path.insert(0, str(where))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])


def summary(results: list[tuple[bool, int, float]], wall: float) -> dict[str, Any]:
    runs = sorted(r[1] for r in results)
    return {
        "right": 100 * sum(r[0] for r in results) / len(results),
        "mean": statistics.mean(runs),
        "p95": runs[max(0, math.ceil(0.95 * len(runs)) - 1)],
        "stated": 100 * statistics.mean(r[2] for r in results),
        "wall": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--setting", nargs="+", default=list(SETTINGS))
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--tools", nargs="+", default=["harness", "git-bayesect"])
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument(
        "--smoke", action="store_true", help="seconds: 5 trials, N = 16, the harness only"
    )
    args = ap.parse_args()
    if args.smoke:
        args.trials, args.n, args.setting, args.tools = 5, [16], ["100/0", "50/0"], ["harness"]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-bayesect-") as tmp:
        if "git-bayesect" in args.tools:
            install_bayesect(Path(tmp) / "site")
        print("| N | setting | tool | right | runs (mean) | runs (p95) | stated | wall |")
        print("|---|---|---|---|---|---|---|---|")
        with ProcessPoolExecutor(args.jobs) as pool:
            for n in args.n:
                for setting in args.setting:
                    for tool in args.tools:
                        start = time.monotonic()
                        work = [(tool, setting, n, t) for t in range(args.trials)]
                        found = list(pool.map(_run, work, chunksize=4))
                        s = summary(found, time.monotonic() - start)
                        rows.append({"n": n, "setting": setting, "tool": tool, **s})
                        print(
                            f"| {n} | {setting} | {tool} | {s['right']:.1f}% | {s['mean']:.1f} "
                            f"| {s['p95']} | {s['stated']:.1f}% | {s['wall']:.0f} s |",
                            flush=True,
                        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
