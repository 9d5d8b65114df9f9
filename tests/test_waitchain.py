"""Location in the stuck process for Python programs (issue 18, item 5): a thread whose
call is only a wait (Popen.wait, Process.join, Pool.map …) is not the location; the
wait-for chain is followed to where it ends, and `waits` says the chain in words."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness.analysis import classify, waitchain
from harness.analysis.classify import Verdict
from harness.config.signatures import load_signatures
from harness.outcome import Kind
from harness.sampling.model import (
    Frame,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadSample,
    ThreadStack,
)
from harness.sampling.waits import ThreadWait
from harness.vocab import Mechanism, StackToolName, WaitKind, WaitsFor
from tests.harness_cli import verdict_of, watch_cmd, watch_opts
from tests.samples import sample_set

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

PROGRAMS = Path(__file__).resolve().parent / "programs"
SIGS = load_signatures()
SUB = "/usr/lib/python3.11/subprocess.py"
PROG = "/work/prog.py"

PARENT = [  # py-spy: a parent in Popen.wait
    Frame("Popen._try_wait", file=SUB, line=2004),
    Frame("Popen._wait", file=SUB, line=2046),
    Frame("Popen.wait", file=SUB, line=1264),
    Frame("supervise", file=PROG, line=27, own=True),
    Frame("<module>", file=PROG, line=34, own=True),
]
CHILD = [
    Frame("chatter", file=PROG, line=20, own=True),
    Frame("<module>", file=PROG, line=32, own=True),
]


def _popen_samples() -> SampleSet:
    def thread(pid: int, syscall: str, args: list[int]) -> ThreadSample:
        return ThreadSample(pid, "python", "S", "", syscall, 0.1, args)

    snap = Snapshot(
        1.0,
        [
            ProcessSample(100, 1, "python", "", [], "sleeping", True, [thread(100, "61", [101])]),
            ProcessSample(101, 100, "python", "", [], "sleeping", True, [thread(101, "1", [1])]),
        ],
    )
    activity = [
        ThreadActivity(100, 100, "python", ["S"] * 3, 0.0, "do_wait", "61"),
        ThreadActivity(101, 101, "python", ["S"] * 3, 0.0, "pipe_write", "1"),
    ]
    stacks = [
        ThreadStack(100, 100, "MainThread", PARENT, StackToolName.PY_SPY, python=True),
        ThreadStack(101, 101, "MainThread", CHILD, StackToolName.PY_SPY, python=True),
        ThreadStack(101, 101, "python", [Frame("__GI___libc_write")], StackToolName.EU_STACK),
    ]
    waits = [
        ThreadWait(100, 100, WaitKind.TREE, "wait4 for child 101 (in the tree)", "child:101"),
        ThreadWait(101, 101, WaitKind.TREE, "write on pipe 9", "pipe:[9]", [100]),
    ]
    return sample_set([snap], activity, stacks, duration_s=1.0, waits=waits)


def test_a_parent_in_popen_wait_is_never_the_location() -> None:
    """Before: the parent's `supervise` (its Python frame won over the C rule)."""
    s = _popen_samples()
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.mechanism, v.location) == ("deadlock", "chatter")
    assert any("native frames of tid 101: __GI___libc_write" in e for e in v.evidence)
    chain = waitchain.follow(s)
    assert chain is not None and chain.end == (101, 101)
    assert chain.text(v.location) == (
        "pid 100 waits for child pid 101 in Popen.wait; pid 101 blocks writing stdout "
        "(pipe:[9]), read only by pid 100: located in chatter"
    )


def test_a_pipe_also_read_outside_the_tree_is_not_read_only_by_the_waiter() -> None:
    """The watch loop called the write OUTSIDE (a reader outside the tree holds the pipe
    too): the chain must not say "read only by" (review of issue 18, 2.10)."""
    s = _popen_samples()
    s.waits[1].kind = WaitKind.OUTSIDE
    chain = waitchain.follow(s)
    assert chain is not None and chain.end == (101, 101)
    text = chain.text("chatter")
    assert "read only by" not in text
    assert "blocks writing stdout (pipe:[9]), read by pid 100 and outside the tree" in text


def test_waiters_are_named_by_the_call_the_program_made() -> None:
    w = waitchain.waiter(ThreadStack(1, 1, "m", PARENT, StackToolName.PY_SPY, True), None)
    assert w is not None and (w.waits_for, w.call) == (WaitsFor.CHILD, "Popen.wait")
    mp = "/usr/lib/python3.11/multiprocessing/"
    join = [
        Frame("Popen.poll", file=mp + "popen_fork.py"),
        Frame("Popen.wait", file=mp + "popen_fork.py"),
        Frame("BaseProcess.join", file=mp + "process.py"),
        Frame("main", file=PROG, own=True),
    ]
    w = waitchain.waiter(ThreadStack(1, 1, "m", join, StackToolName.PY_SPY, True), None)
    assert w is not None and w.call == "Process.join"
    # a program's own blocking read is not a wait for anyone
    reader = [Frame("Connection._recv", file=mp + "connection.py"), Frame("main", own=True)]
    assert (
        waitchain.waiter(ThreadStack(1, 1, "m", reader, StackToolName.PY_SPY, True), None) is None
    )
    # a native wait under glibc's internal name (eu-stack: __GI___wait4), the C replica's
    # parent: before, only a bare `__wait4` was a waiter and its `waits` line was empty
    for name, call in (
        ("__GI___wait4", "wait4"),
        ("__wait4", "wait4"),
        ("__libc_waitpid", "waitpid"),
    ):
        native = [Frame(name, "libc.so.6"), Frame("container_entry", "puffer", own=True)]
        w = waitchain.waiter(ThreadStack(1, 1, "m", native, StackToolName.EU_STACK), None)
        assert w is not None and (w.waits_for, w.call) == (WaitsFor.CHILD, call), name
    joined = [Frame("__pthread_clockjoin_ex", "libc.so.6"), Frame("main", "p", own=True)]
    w = waitchain.waiter(ThreadStack(1, 1, "m", joined, StackToolName.EU_STACK), None)
    assert w is not None and w.waits_for is WaitsFor.THREAD
    # os.waitpid leaves no Python frame of its own: the wait4 says it
    bare = ThreadStack(1, 1, "m", [Frame("main", file=PROG, own=True)], StackToolName.PY_SPY, True)
    wait = ThreadWait(1, 1, WaitKind.TREE, "wait4 for child 7 (in the tree)")
    w = waitchain.waiter(bare, wait)
    assert w is not None and (w.call, w.child) == ("os.waitpid", 7)


MP = "/usr/lib/python3.11/multiprocessing/process.py"
FUT = "/usr/lib/python3.11/concurrent/futures/_base.py"
THR = "/usr/lib/python3.11/threading.py"


def _thread(tid: int) -> ThreadSample:
    return ThreadSample(tid, "python", "S", "futex_do_wait", "202", 0.1)


def _set(procs: dict[tuple[int, int], list[int]], stacks: list[ThreadStack]) -> SampleSet:
    """Samples of a tree at rest: (pid, ppid) → tids, every thread asleep in a futex."""
    snap = Snapshot(
        1.0,
        [
            ProcessSample(pid, ppid, "python", "", [], "sleeping", True, [_thread(t) for t in tids])
            for (pid, ppid), tids in procs.items()
        ],
    )
    activity = [
        ThreadActivity(pid, t, "python", ["S"] * 3, 0.0, "futex_do_wait", "202")
        for (pid, _), tids in procs.items()
        for t in tids
    ]
    return sample_set([snap], activity, stacks, duration_s=1.0)


def test_a_result_nothing_is_left_to_produce_ends_the_chain_at_its_waiter() -> None:
    """fork-threadpool: the fork()ed child waits in Future.result with no other thread and
    no child; before, the chain stopped there with no end and the location fell back to the
    parent's `<module>` at Process.join."""
    parent = [
        Frame("Popen.poll", file="/usr/lib/python3.11/multiprocessing/popen_fork.py"),
        Frame("Popen.wait", file="/usr/lib/python3.11/multiprocessing/popen_fork.py"),
        Frame("BaseProcess.join", file=MP),
        Frame("<module>", file=PROG, line=35, own=True),
    ]
    worker = [Frame("_worker", file="/usr/lib/python3.11/concurrent/futures/thread.py")]
    child = [
        Frame("Condition.wait", file=THR, line=327),
        Frame("Future.result", file=FUT, line=451),
        Frame("child", file=PROG, line=26, own=True),
        Frame("BaseProcess.run", file=MP),
        Frame("BaseProcess._bootstrap", file=MP),
        Frame("<module>", file=PROG, line=35, own=True),  # the parent's, inherited by fork
    ]
    s = _set(
        {(100, 1): [100, 102], (101, 100): [101]},
        [
            ThreadStack(100, 100, "MainThread", parent, StackToolName.PY_SPY, python=True),
            ThreadStack(100, 102, "worker", worker, StackToolName.PY_SPY, python=True),
            ThreadStack(101, 101, "MainThread", child, StackToolName.PY_SPY, python=True),
        ],
    )
    s.waits = [ThreadWait(100, 100, WaitKind.TREE, "wait4 for child 101 (in the tree)")]
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.location, v.location_frames[0]) == ("child", "child (prog.py:26)"), v.evidence
    chain = waitchain.follow(s)
    assert chain is not None and (chain.end, chain.stranded) == ((101, 101), True)
    assert chain.text(v.location) == (
        "pid 100 waits for child pid 101 in Process.join; pid 101 waits for a result in "
        "Future.result; pid 101 has no other thread and no child process to produce it: "
        "located in child"
    )
    # a result waiter that has a thread to produce it is not stranded
    s.stacks.append(ThreadStack(101, 103, "w", worker, StackToolName.PY_SPY, python=True))
    s.snapshots[0].processes[1].threads.append(_thread(103))
    chain = waitchain.follow(s)
    assert chain is not None and (chain.end, chain.stranded) == ((101, 103), False)


LIBGOMP = "/venv/lib/python3.11/site-packages/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0"
LLOYD = "/venv/lib/python3.11/site-packages/sklearn/cluster/_k_means_lloyd.cpython-311.so"
REGION = "__pyx_pf_7sklearn_7cluster_14_k_means_lloyd_6lloyd_iter_chunked_dense._omp_fn.0"


def _extension_in_openmp(native: list[Frame]) -> SampleSet:
    py = [
        Frame("_kmeans_single_lloyd", file="/venv/sklearn/cluster/_kmeans.py", line=706),
        Frame("KMeans.fit", file="/venv/sklearn/cluster/_kmeans.py", line=1515),
        Frame("cluster", file=PROG, line=26, own=True),
        Frame("BaseProcess.run", file=MP),
        Frame("BaseProcess._bootstrap", file=MP),
    ]
    tail = [Frame("_PyEval_EvalFrameDefault"), Frame("Py_RunMain")]
    return _set(
        {(101, 100): [101]},
        [
            ThreadStack(101, 101, "MainThread", py, StackToolName.PY_SPY, python=True),
            ThreadStack(101, 101, "python", native + tail, StackToolName.EU_STACK),
        ],
    )


def test_a_python_frame_over_an_openmp_region_is_located_in_the_region() -> None:
    """sklearn-kmeans-fork: the child's KMeans waits at its region's barrier in a wheel's
    renamed libgomp (Frame.runtime "libgomp"); before, the location was `cluster`."""
    native = [
        Frame("gomp_team_barrier_wait_end", LIBGOMP, runtime="libgomp"),
        Frame(REGION, LLOYD),
        Frame("GOMP_parallel", LIBGOMP, runtime="libgomp"),
        Frame("__pyx_pw_7sklearn_7cluster_14_k_means_lloyd_7lloyd_iter_chunked_dense", LLOYD),
    ]
    v = classify.classify_hang(_extension_in_openmp(native), "no progress", SIGS)
    assert v.location == REGION, v.evidence
    assert v.location_frames == [
        f"{REGION} (_k_means_lloyd.cpython-311.so)",
        "gomp_team_barrier_wait_end (libgomp-e985bcbb.so.1.0.0)",
    ]
    assert v.runtime[0] == "libgomp barrier"
    assert any(
        e.startswith(f"located in the OpenMP region {REGION}, which cluster ") for e in v.evidence
    )
    # an outlined function with no OpenMP runtime under it is no region the thread waits in
    v = classify.classify_hang(_extension_in_openmp(native[1:]), "no progress", SIGS)
    assert v.location == "cluster"
    # torch's at::parallel_for ends its region inline (no outlined frame on the stack): the
    # Python frame stays the location (torch-omp-fork)
    torch = [
        Frame("gomp_team_barrier_wait_end", "/venv/torch/lib/libgomp.so.1", runtime="libgomp"),
        Frame("gomp_team_end", "/venv/torch/lib/libgomp.so.1", runtime="libgomp"),
        Frame("at::TensorIteratorBase::for_each", "/venv/torch/lib/libtorch_cpu.so"),
    ]
    assert classify.classify_hang(_extension_in_openmp(torch), "x", SIGS).location == "cluster"


def test_a_function_of_the_program_says_more_than_a_scripts_top_level() -> None:
    """logging-dictconfig: two threads in a lock-order cycle, the main one at the script's
    top level; before, `<module>` won the tie."""
    top = [Frame("<module>", file=PROG, line=41, own=True)]
    emit = [
        Frame("_acquireLock", file="/usr/lib/python3.11/logging/__init__.py", line=235),
        Frame("AuditHandler.emit", file=PROG, line=30, own=True),
        Frame("Thread.run", file=THR),
    ]
    s = _set(
        {(100, 1): [100, 101]},
        [
            ThreadStack(100, 100, "MainThread", top, StackToolName.PY_SPY, python=True),
            ThreadStack(100, 101, "emitter", emit, StackToolName.PY_SPY, python=True),
        ],
    )
    v = classify.classify_hang(s, "no progress", SIGS)
    assert (v.location, v.location_frames[-1]) == (
        "AuditHandler.emit",
        "_acquireLock (__init__.py:235)",
    )
    # alone, a top level is still a location
    s.stacks.pop()
    s.activity.pop()
    assert classify.classify_hang(s, "x", SIGS).location == "<module>"


# ---------------------------------------------------------------- real programs


def watch(tmp_path: Path, program: str) -> Verdict:
    """The verdict of `harness watch` on a Python program of tests/programs."""
    opts = watch_opts(startup=4, stall=3, timeout=40)
    cmd = [sys.executable, str(PROGRAMS / program)]
    return verdict_of(watch_cmd(tmp_path / "reports", *cmd, opts=opts).loaded)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_popen_wait_on_a_child_blocked_writing_its_stdout(tmp_path: Path) -> None:
    v = watch(tmp_path, "wait_popen_pipe.py")
    assert (v.kind, v.location) == (Kind.HANG, "chatter"), v.summary
    assert v.location_frames[0].startswith("chatter (wait_popen_pipe.py:")
    m = re.fullmatch(
        r"pid (\d+) waits for child pid (\d+) in Popen\.wait; pid (\d+) blocks writing stdout "
        r"\(pipe:\[\d+\]\), read only by pid (\d+): located in chatter",
        v.waits_for,
    )
    assert m is not None, v.waits_for
    parent, child, writer, reader = map(int, m.groups())
    assert (writer, reader) == (child, parent)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_process_join_before_draining_its_queue(tmp_path: Path) -> None:
    v = watch(tmp_path, "wait_process_join.py")
    assert (v.kind, v.location) == (Kind.HANG, "Queue._feed"), v.summary
    assert "in Process.join" in v.waits_for and "blocks writing pipe:[" in v.waits_for
    assert any("located where the wait-for chain ends" in e for e in v.evidence)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_pool_map_on_a_killed_worker_stays_with_the_caller_and_says_why(
    tmp_path: Path,
) -> None:
    """The chain ends at a worker that is gone: no stack to locate in, so the location is
    the caller's line, and `waits` names the dead worker."""
    v = watch(tmp_path, "wait_pool_killed.py")
    assert (v.kind, v.location) == (Kind.HANG, "main"), v.summary
    assert re.search(r"waits for a result in Pool\.map; pid \d+, its child, was ", v.waits_for)
    assert any("located at the waiting thread" in e for e in v.evidence)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_executor_used_in_a_forked_child_is_located_in_the_child(tmp_path: Path) -> None:
    v = watch(tmp_path, "wait_fork_executor.py")
    assert (v.kind, v.location) == (Kind.HANG, "child"), v.summary
    frames = v.location_frames
    assert frames[0].startswith("child (wait_fork_executor.py:"), frames
    assert frames[1].startswith("Future.result ("), frames
    m = re.fullmatch(
        r"pid (\d+) waits for child pid (\d+) in Process\.join; pid (\d+) waits for a result "
        r"in Future\.result; pid (\d+) has no other thread and no child process to produce "
        r"it: located in child",
        v.waits_for,
    )
    assert m is not None, v.waits_for
    assert m[2] == m[3] == m[4] != m[1]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_lock_order_cycle_is_located_in_the_threads_function(tmp_path: Path) -> None:
    v = watch(tmp_path, "wait_lock_order.py")
    got = (v.kind, v.mechanism, v.location)
    assert got == (Kind.HANG, Mechanism.DEADLOCK, "backwards"), v.summary
    assert v.location_frames[0].startswith("backwards (wait_lock_order.py:")
