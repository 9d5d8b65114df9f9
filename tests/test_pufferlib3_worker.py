"""PufferLib 3.0.0 with a killed env worker (a real trigger): the main process spins in
Multiprocessing.recv, and the dead worker is named as the cause."""

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

from harness.outcome import Kind
from harness.report.load import report_from_json
from harness.vocab import Mechanism
from tests.harness_cli import ROOT, exit_pid, samples_of, tree_is_gone, verdict_of
from tests.pufferlib3 import MARKS, PIN, SMALL, STALL, build

pytestmark = MARKS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    build(tmp_path_factory)


def test_dead_worker_leaves_main_spinning_in_recv(tmp_path: Path, built: None) -> None:
    # a real trigger: with the Multiprocessing backend the main process busy-waits on its
    # forked workers' shared-memory flags and never checks that they are alive; SIGKILL one
    # worker mid-run and the trainer spins forever in Multiprocessing.recv (for the whole
    # stall window: most of this test's CPU, short because a SMALL epoch is)
    argv = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "breakout",
        *PIN,
        *SMALL,
        "--steps",
        "2000000",  # far more than it runs before the kill
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
    # one OpenMP/torch thread per process: the trainer otherwise takes both cores and fights
    # the other test workers for them
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        worker = _wait_for_worker(proc, tmp_path, frames=1, timeout=180)
        worker.kill()
        out, _ = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # --json: the report on stdout, typed as report.json is read back (no file of its folder
    # is read: the report root stands for the folder)
    report = report_from_json(json.loads(out), tmp_path)
    v = verdict_of(report)
    assert proc.returncode == 2, v
    assert (v.kind, v.mechanism, v.location) == (Kind.HANG, Mechanism.SPIN, "Multiprocessing.recv")
    # README's claim: the killed worker is named as the cause (harness/data/causes.toml)
    causes = [c.id for c in v.causes]
    assert "dead-worker" in causes, v.causes
    python_stacks = {s.pid for s in samples_of(report).stacks if s.python}
    assert len(python_stacks) >= 2, "py-spy stacks of the main process and the live worker"
    assert tree_is_gone(exit_pid(report))


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
