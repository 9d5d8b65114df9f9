"""Location in the stuck process for Python programs (issue 18, item 5): a thread whose
call is only a wait (Popen.wait, Process.join, Pool.map …) is not the location; the
wait-for chain is followed to where it ends, and `waits` says the chain in words."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness.analysis import classify, waitchain
from harness.config.signatures import load_signatures
from harness.sampling.model import (
    Frame,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadSample,
    ThreadStack,
    ThreadWait,
)
from harness.vocab import StackToolName, WaitKind
from tests.harness_cli import HarnessResult, harness

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
    return SampleSet([snap], activity, stacks, {}, [], 1.0, waits=waits)


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


def test_waiters_are_named_by_the_call_the_program_made() -> None:
    w = waitchain.waiter(ThreadStack(1, 1, "m", PARENT, StackToolName.PY_SPY, True), None)
    assert w is not None and (w.waits_for, w.call) == (waitchain.For.CHILD, "Popen.wait")
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
    # os.waitpid leaves no Python frame of its own: the wait4 says it
    bare = ThreadStack(1, 1, "m", [Frame("main", file=PROG, own=True)], StackToolName.PY_SPY, True)
    wait = ThreadWait(1, 1, WaitKind.TREE, "wait4 for child 7 (in the tree)")
    w = waitchain.waiter(bare, wait)
    assert w is not None and (w.call, w.child) == ("os.waitpid", 7)


# ---------------------------------------------------------------- real programs


def watch(tmp_path: Path, program: str) -> HarnessResult:
    opts = ["--startup", "4", "--stall", "3", "--timeout", "40"]
    cmd = [sys.executable, str(PROGRAMS / program)]
    return harness("watch", *opts, "--", *cmd, report_root=tmp_path / "reports")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_popen_wait_on_a_child_blocked_writing_its_stdout(tmp_path: Path) -> None:
    res = watch(tmp_path, "wait_popen_pipe.py")
    v = res.report["verdict"]
    assert (v["kind"], v["location"]) == ("hang", "chatter"), v["summary"]
    assert v["location_frames"][0].startswith("chatter (wait_popen_pipe.py:")
    m = re.fullmatch(
        r"pid (\d+) waits for child pid (\d+) in Popen\.wait; pid (\d+) blocks writing stdout "
        r"\(pipe:\[\d+\]\), read only by pid (\d+): located in chatter",
        v["waits_for"],
    )
    assert m is not None, v["waits_for"]
    parent, child, writer, reader = map(int, m.groups())
    assert (writer, reader) == (child, parent)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_process_join_before_draining_its_queue(tmp_path: Path) -> None:
    res = watch(tmp_path, "wait_process_join.py")
    v = res.report["verdict"]
    assert (v["kind"], v["location"]) == ("hang", "Queue._feed"), v["summary"]
    assert "in Process.join" in v["waits_for"] and "blocks writing pipe:[" in v["waits_for"]
    assert any("located where the wait-for chain ends" in e for e in v["evidence"])


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_pool_map_on_a_killed_worker_stays_with_the_caller_and_says_why(
    tmp_path: Path,
) -> None:
    """The chain ends at a worker that is gone: no stack to locate in, so the location is
    the caller's line, and `waits` names the dead worker."""
    res = watch(tmp_path, "wait_pool_killed.py")
    v = res.report["verdict"]
    assert (v["kind"], v["location"]) == ("hang", "main"), v["summary"]
    assert re.search(r"waits for a result in Pool\.map; pid \d+, its child, was ", v["waits_for"])
    assert any("located at the waiting thread" in e for e in v["evidence"])
