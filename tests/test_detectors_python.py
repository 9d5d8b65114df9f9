"""The causes of hangs between processes of a Python tree (pipes, queues, pools, fork with
threads), each on a real program under a real `harness watch`, found once (one cause per
finding, not per process), and none of them on the healthy look-alike of each program (the
same program done right, which finishes)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from harness.analysis.causes import Cause
from harness.analysis.detectors import DETECTORS, run
from harness.config.causes import NoParams
from harness.outcome import Kind
from harness.report.load import report_from_json
from harness.report.model import Report
from harness.sampling.model import ProcessSample
from harness.vocab import EventKind
from tests.harness_cli import ROOT, samples_of, verdict_of, watch_cmd, watch_opts

pytestmark = [pytest.mark.timeout(120), pytest.mark.spread]
PROGRAMS = ROOT / "tests" / "programs"
SAMPLES = ROOT / "tests" / "data" / "samples"
FAST = watch_opts(startup=3, stall=2, quiescent=1, timeout=30)
NEW_CAUSES = {"pipe-never-read", "queue-not-drained", "pool-lost-worker", "fork-with-threads"}


def watch(tmp_path: Path, program: str, *args: str) -> Report:
    cmd = [sys.executable, str(PROGRAMS / f"{program}.py"), *args]
    return watch_cmd(tmp_path / "reports", *cmd, opts=FAST).loaded


def cause(report: Report, expected: str) -> Cause:
    """The one cause of a hang, which must be `expected`."""
    v = verdict_of(report)
    assert v.kind is Kind.HANG, v
    found = [c for c in v.causes if c.id in NEW_CAUSES | {"dead-worker"}]
    assert [c.id for c in found] == [expected], v.causes
    return found[0]


def pids(report: Report) -> dict[int, ProcessSample]:
    """Every process the watch loop saw, by pid (the last sighting)."""
    return {p.pid: p for snap in samples_of(report).snapshots for p in snap.processes}


def only_child(report: Report) -> ProcessSample:
    """The one child of the watched root (the test fails when there are more or none)."""
    parent = root_pid(report)
    [child] = [p for p in pids(report).values() if p.ppid == parent]
    return child


def root_pid(report: Report) -> int:
    starts = [e for e in samples_of(report).events if e.event is EventKind.START]
    assert starts
    return starts[0].pid


@pytest.mark.slow
def test_pipe_never_read(tmp_path: Path) -> None:
    report = watch(tmp_path, "py_pipe_never_read")
    c = cause(report, "pipe-never-read")
    parent, child = root_pid(report), only_child(report)
    sentence = c.sentence
    assert f"pid {child.pid} (" in sentence and f"only pid {parent} reads" in sentence
    assert "-c import sys for i in range(20000)" in sentence  # the child's command, one line
    assert "Popen.wait (py_pipe_never_read.py:22)" in sentence  # the parent's line
    assert "fd 1 (stdout)" in sentence or "pipe:[" in sentence
    assert any("communicate()" in r for r in c.remedies)


@pytest.mark.slow
def test_queue_not_drained(tmp_path: Path) -> None:
    report = watch(tmp_path, "py_queue_not_drained")
    c = cause(report, "queue-not-drained")
    parent, child = root_pid(report), only_child(report)
    sentence = c.sentence
    assert f"pid {parent} joins pid {child.pid}" in sentence
    assert "BaseProcess.join (py_queue_not_drained.py:26)" in sentence
    assert "QueueFeederThread" in sentence and "Queue._finalize_join" in sentence
    assert "Joining processes that use queues" in sentence
    feeder = int(re.search(r"QueueFeederThread \(tid (\d+)\)", sentence).group(1))  # type: ignore[union-attr]
    assert feeder in {t.tid for t in child.threads} and feeder != child.pid
    assert any("cancel_join_thread" in r for r in c.remedies)


@pytest.mark.slow
def test_pool_lost_a_killed_worker(tmp_path: Path) -> None:
    """A Pool worker SIGKILLed mid-task: one cause, pool-lost-worker, and no dead-worker
    for the same death (the pool reaps its workers: the status is seldom seen)."""
    report = watch(tmp_path, "py_pool_lost_worker")
    c = cause(report, "pool-lost-worker")
    parent = root_pid(report)
    exits = [e for e in samples_of(report).events if e.event is EventKind.EXIT]
    assert len(exits) == 1 and exits[0].ppid == parent
    sentence = c.sentence
    assert f"multiprocessing.Pool of pid {parent} lost a worker (pid {exits[0].pid} " in sentence
    assert "Pool.map (py_pool_lost_worker.py:26)" in sentence
    assert "wait idle for tasks" in sentence


@pytest.mark.slow
def test_executor_lost_its_only_worker(tmp_path: Path) -> None:
    """ProcessPoolExecutor(max_tasks_per_child=2): its worker exits by itself and is not
    replaced (python/cpython#115634); no worker is left while Future.result waits."""
    report = watch(tmp_path, "py_executor_lost_worker")
    c = cause(report, "pool-lost-worker")
    sentence = c.sentence
    assert f"ProcessPoolExecutor of pid {root_pid(report)} lost a worker" in sentence
    assert "Future.result (py_executor_lost_worker.py:21)" in sentence
    assert "no worker is left" in sentence


@pytest.mark.slow
def test_fork_with_a_thread_pool(tmp_path: Path) -> None:
    report = watch(tmp_path, "py_fork_thread_pool")
    c = cause(report, "fork-with-threads")
    parent, child = root_pid(report), only_child(report)
    sentence = c.sentence
    assert f"pid {child.pid} was forked without exec by pid {parent}" in sentence
    assert "which had 3 thread(s) at the fork; the child has 1" in sentence
    assert "Future.result (py_fork_thread_pool.py:31)" in sentence
    assert "worker threads stayed in the parent" in sentence
    assert any("ThreadPoolExecutor-0_" in e for e in c.evidence)


@pytest.mark.slow
def test_fork_with_a_held_lock(tmp_path: Path) -> None:
    report = watch(tmp_path, "py_fork_held_lock")
    c = cause(report, "fork-with-threads")
    parent = root_pid(report)
    sentence = c.sentence
    assert f"by pid {parent}, which had 2 thread(s) at the fork; the child has 1" in sentence
    assert "main (py_fork_held_lock.py:" in sentence
    assert "only a parent thread could release" in sentence
    assert any("holder" in e for e in c.evidence)


@pytest.mark.parametrize(
    ("program", "arg"),
    [
        ("py_pipe_never_read", "communicate"),
        ("py_queue_not_drained", "drain"),
        ("py_pool_lost_worker", "slow"),
        ("py_executor_lost_worker", "plain"),
        ("py_fork_thread_pool", "own"),
    ],
)
def test_healthy_look_alikes_pass_without_a_cause(tmp_path: Path, program: str, arg: str) -> None:
    """The same programs done right (communicate, drain before join, no lost worker, a pool
    made in the child) finish: no hang, no cause."""
    v = verdict_of(watch(tmp_path, program, arg))
    assert v.kind is Kind.PASS, v
    assert v.causes == []


@pytest.mark.parametrize(
    "run_name", sorted(p.stem for p in SAMPLES.glob("*.json") if not p.stem.endswith(".output"))
)
def test_none_of_them_on_the_saved_runs(run_name: str) -> None:
    """The saved runs of tests/data/samples (C programs: a killed worker, a fork after an
    OpenMP team, lock cycles, a spin; the replica): none of these four shapes is there."""
    data = json.loads((SAMPLES / f"{run_name}.json").read_text())
    s = report_from_json({"samples": data}, SAMPLES).samples
    assert s is not None and s.snapshots
    found = {name: run(DETECTORS[name], NoParams(), s, []) for name in sorted(NEW_CAUSES)}
    assert len(found) == 4 and all(m == [] for m in found.values()), found
