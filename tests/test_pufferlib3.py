"""PufferLib 3.0.0, a real trainer we did not write, under the harness on CPU (issue 6).

The first run builds it from the PyPI sdist into the harness cache (~2-3 min); later runs
reuse that build (the cache is the user's, so CI on the same machine reuses it too)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.harness_cli import ROOT, harness, tree_is_gone

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(1800)]
PIN = ("--pin", "pufferlib-3.0.0")
# the stall window of the hang tests: longer than the longest gap between two dashboard
# frames of a healthy run while the other test worker loads the second core (a training
# step in LSTM.forward was seen to take over 20 s then)
STALL = "40"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    res = harness(
        "build", "puffer_breakout", *PIN, report_root=tmp_path_factory.mktemp("b"), timeout=1700
    )
    assert res.code == 0, res.stdout + res.stderr


def test_breakout_trains_on_cpu_and_passes_checks(tmp_path: Path, built: None) -> None:
    res = harness(
        "run",
        "breakout",
        *PIN,
        "--steps",
        "1100000",
        "--timeout",
        "240",
        report_root=tmp_path,
        timeout=300,
    )
    report = res.report
    assert res.code == 0, report["verdict"]
    assert report["progress"]["last_metrics"]["agent_steps"] >= 1_000_000
    assert report["progress"]["measured_sps"] > 5_000
    names = {c["name"]: c for c in report["checks"]}
    assert names["epochs >= 1"]["status"] == "pass"
    assert names["env/score in [0, 864]"]["status"] == "pass"
    assert names["config [train] clip_coef in [0.01, 1]"]["observed"] == "0.196968"
    assert all(c["status"] == "pass" for c in report["checks"])


def test_stuck_final_evaluation_is_a_spin_located_by_py_spy(tmp_path: Path, built: None) -> None:
    # a real trigger: with frameskip 0 no episode ever ends, so the evaluation loop after
    # training (it waits for episode stats) never exits; the trainer spins, silent
    res = harness(
        "run",
        "breakout",
        *PIN,
        "--steps",
        "100000",
        "--arg=--env.frameskip=0",
        "--stall",
        STALL,
        "--timeout",
        "180",
        report_root=tmp_path,
        timeout=300,
    )
    report = res.report
    v = report["verdict"]
    assert res.code == 2, v
    assert (v["kind"], v["mechanism"], v["location"]) == ("hang", "spin", "evaluate")
    assert report["trigger"] == "stall"
    assert any("py-spy" in line for line in v["evidence"])
    assert report["samples"]["tools"]["py-spy"] == "used"
    assert tree_is_gone(report["exit"]["pid"])


def test_dead_worker_leaves_main_spinning_in_recv(tmp_path: Path, built: None) -> None:
    # a real trigger: with the Multiprocessing backend the main process busy-waits on its
    # forked workers' shared-memory flags and never checks that they are alive; SIGKILL one
    # worker mid-run and the trainer spins forever in Multiprocessing.recv
    argv = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "breakout",
        *PIN,
        "--steps",
        "2000000",
        "--arg=--vec.backend=Multiprocessing",
        "--arg=--vec.num-workers=2",
        "--stall",
        STALL,
        "--timeout",
        "240",
        "--report-dir",
        str(tmp_path),
        "--json",
    ]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        worker = _wait_for_worker(proc, tmp_path, frames=3, timeout=180)
        worker.kill()
        out, _ = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    report = json.loads(out)
    v = report["verdict"]
    assert proc.returncode == 2, v
    assert (v["kind"], v["mechanism"], v["location"]) == ("hang", "spin", "Multiprocessing.recv")
    # README's claim: the killed worker is named as the cause (harness/data/causes.toml)
    causes = [c["id"] for c in v["causes"]]
    assert "dead-worker" in causes, v["causes"]
    python_stacks = {s["pid"] for s in report["samples"]["stacks"] if s["python"]}
    assert len(python_stacks) >= 2, "py-spy stacks of the main process and the live worker"
    assert tree_is_gone(report["exit"]["pid"])


def _wait_for_worker(
    proc: subprocess.Popen[bytes], reports: Path, frames: int, timeout: float
) -> psutil.Process:
    """A forked env worker of the trainer, once the trainer has shown `frames` epochs;
    fails at once, with the harness's verdict, when the harness ends first."""
    harness_pid = proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            pytest.fail(f"the run ended before a worker was killed: {out[-2000:]}")
        logs = list(reports.glob("*/output.log"))
        if logs and logs[0].read_bytes().count(b"\x1b[0;0H") > frames:
            tree = psutil.Process(harness_pid).children(recursive=True)
            trainers = [p for p in tree if "puffer" in " ".join(p.cmdline())]
            workers = [c for t in trainers for c in t.children() if c in trainers]
            if workers:
                return workers[0]
        time.sleep(0.5)
    pytest.fail("the trainer never started its workers and epochs")
