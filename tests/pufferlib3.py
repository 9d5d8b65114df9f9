"""PufferLib 3.0.0, a real trainer we did not write, under the harness on CPU (issue 6):
what its tests share. The first build of it goes from the PyPI sdist into the harness cache
(~2-3 min); later runs reuse that build (the cache is the user's, so CI on the same machine
reuses it too). Its three tests are three modules in one xdist group (one worker runs
them one after the other); the build cache's lock makes any second worker (another
grouping) wait for the first one's build and reuse it, and a marker shared by the whole
test run spares the later modules even the cache-hit check (it unpacks the sdist: ~4 CPU-s
each)."""

from __future__ import annotations

import fcntl
import os

import pytest

from tests.harness_cli import harness

# one worker runs the three modules one after the other: the first builds (minutes on a cold
# cache), the next two reuse it; spread over three workers, two of them sat idle on the lock
# below for the whole build (~100 s each on 2 cores) while other tests waited for a worker
MARKS = [
    pytest.mark.real,
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.xdist_group("pufferlib3"),
]
PIN = ("--pin", "pufferlib-3.0.0")
# A smaller trainer than the pin's run command (2 x 256 agents, a 64-step horizon: 32,768
# steps per epoch): 2 x 64 agents and a 32-step horizon, 4,096 steps per epoch. The trainer's
# own flags (pufferlib/config/default.ini, ocean/breakout.ini); the minibatch may not exceed
# the batch. Every epoch, the gap between two dashboard frames, is 8x shorter, and so is the
# final evaluation (32 rollouts of one batch: 1M steps before, 131k now), which was most of
# the training test's CPU.
SMALL = (
    "--arg=--env.num-envs=64",
    "--arg=--train.bptt-horizon=32",
    "--arg=--train.minibatch-size=4096",
)
# the stall window of the hang tests, which spin for all of it (it is most of their CPU):
# longer than the longest gap between two dashboard frames of a healthy run while the other
# test workers load the cores. A SMALL epoch takes ~0.2 s of CPU; the pin's 32,768-step
# epochs took about 13 s each with the trainer at ~15% of a core (load average 16 on 2
# cores) and once over 20 s: 1.6 s and 2.5 s at this size, 4x under the window
STALL = "10"


def build(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Build PufferLib 3.0.0 for puffer_breakout (a cache hit after the first time), once
    per test run: the test workers of one run share a marker beside their temp folders."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-N/popen-gwK: pytest-N is the run's, shared
    with (shared / "pufferlib3-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits for the first one's build
        marker = shared / "pufferlib3-built"
        if marker.exists():
            return
        res = harness(
            "build", "puffer_breakout", *PIN, report_root=tmp_path_factory.mktemp("b"), timeout=1700
        )
        assert res.code == 0, res.stdout + res.stderr
        marker.touch()
