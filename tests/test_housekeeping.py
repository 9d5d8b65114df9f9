"""Housekeeping threads and pipe writes on real programs (docs/quiescence.md): a deadlock
beside threads that wake on a timer and do nothing, a Pool that lost a worker, and
`Popen(stdout=PIPE).wait()` with a chatty child get the early verdict (trigger quiescent)
long before the 60 s windows; healthy look-alikes (a Pool with slow or CPU-bound tasks, a
pipe reader waiting for a slow live writer, a periodic poll that ends by itself) pass, each
run several times."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.sampling.model import (
    Frame,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadSample,
    ThreadStack,
)
from harness.vocab import Mechanism, StackToolName, Trigger, WaitKind
from harness.watch import housekeeping as hk
from harness.watch.quiescence import HOUSEKEEPING, X86_64, tree_waits
from harness.watch.treefacts import FactReader
from harness.watch.watchloop import WatchLoop
from tests.harness_cli import (
    HarnessResult,
    exit_pid,
    run_s,
    samples_of,
    tree_is_gone,
    verdict_of,
    watch_cmd,
    watch_opts,
)
from tests.samples import sample_set

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

needs_py_spy = pytest.mark.needs_tool("py-spy", why="only a Python stack shows whose code polls")

WINDOWS = watch_opts(startup=60, stall=60, quiescent=2, timeout=90)

# two heartbeat threads: Condition.wait(timeout) in a loop (a timed futex wait) and
# time.sleep in a loop (clock_nanosleep). They tick half a period apart: each wakes to take
# the GIL while the other sleeps. Beating at the same instants, one was now and then seen
# waiting for the GIL (a futex wait of other arguments) on a loaded machine, which kept it
# from ever being excused
BEATS = """
import threading, time
def until(phase):  # seconds to the next tick at `phase` of each 0.1 s
    return 0.1 - (time.monotonic() - phase) % 0.1
def heartbeat():
    c = threading.Condition()
    with c:
        while True:
            c.wait(until(0.0))
def ticker():
    while True:
        time.sleep(until(0.05))
"""


def deadlock_beside(beats: str) -> str:
    """A lock-order deadlock of two threads beside the heartbeats `beats`.heartbeat and
    `beats`.ticker (`beats` empty: the program's own functions)."""
    return f"""
a, b = threading.Lock(), threading.Lock()
def one():
    with a:
        time.sleep(0.2)
        with b: pass
def two():
    with b:
        time.sleep(0.2)
        with a: pass
threading.Thread(target={beats}heartbeat, daemon=True).start()
threading.Thread(target={beats}ticker, daemon=True).start()
t1, t2 = threading.Thread(target=one), threading.Thread(target=two)
t1.start(); t2.start(); t1.join(); t2.join()
"""


# the heartbeats are the program's own code
HEARTBEAT_DEADLOCK = BEATS + deadlock_beside("")

# CPython's Pool.map never returns when a worker is SIGKILLed (the OOM killer's shape). Its
# worker handler polls the sentinels with no timeout; the stack dump's attach interrupts that
# poll, which resumes as restart_syscall: judged as the poll continued (docs/quiescence.md)
POOL_LOST_WORKER = """
import multiprocessing as mp, os, signal, time
def f(x):
    if x == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(p.map(f, range(4)))
"""

# the subprocess docs' warning: Popen.wait() with stdout=PIPE and a chatty child
POPEN_CHATTY = """
import subprocess, sys
child = "import sys\\nwhile True: sys.stdout.write('x' * 4096)"
subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE).wait()
"""

POOL_SLOW_TASKS = """
import multiprocessing as mp, time
def f(x):
    time.sleep(1.5)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(12))))
"""

# five rounds of two busy workers: 7.5 s, past the 5 s housekeeping span and the 2 s window
# (the test's bound); twelve tasks, as the slow ones above, took both cores for 9 s
POOL_CPU_TASKS = """
import multiprocessing as mp, time
def f(x):
    n, end = 0, time.monotonic() + 1.5  # CPU-bound for 1.5 s of wall time, whatever the load
    while time.monotonic() < end:
        n += 1
    return n
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(10))))
"""

SLOW_WRITER = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    for _ in range(3):
        time.sleep(3)
        os.write(w, b"tick\\n")
    os._exit(0)
os.close(w)
while os.read(r, 100):
    pass
os.wait()
"""

# a deadline polled in a thread that main join()s (finding 3.2): the thread's own loop, the
# rest of the tree (main's join) waits on the tree
PERIODIC_POLL = """
import threading, time
deadline = time.monotonic() + 15
def poll():
    while time.monotonic() < deadline:
        time.sleep(0.1)
t = threading.Thread(target=poll)
t.start(); t.join()
"""

# finding 2.1's healthy shapes, each ending by itself after ~15 s (more than the 5 s span and
# the window): (a) main sleeps in a loop beside an idle ThreadPoolExecutor worker (an
# untimed futex wait: on the tree)
MAIN_SLEEPS_BESIDE_IDLE_POOL = """
import concurrent.futures, time
with concurrent.futures.ThreadPoolExecutor(1) as ex:
    ex.submit(print, "warm", flush=True).result()
    for _ in range(150):
        time.sleep(0.1)
"""

# (b) a thread polls for a file while main join()s it; the file is written after ~14 s by a
# process outside the tree (the test), as another program would
FILE_POLL_THREAD = """
import os, sys, threading, time
def poll():
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.2)
t = threading.Thread(target=poll)
t.start(); t.join()
"""

# (c) Pool.map whose tasks poll with sleep(0.5) for ~14 s
POOL_TASKS_POLL = """
import multiprocessing as mp, time
def f(x):
    end = time.monotonic() + 14
    while time.monotonic() < end:
        time.sleep(0.5)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(2))))
"""


def watch(
    tmp_path: Path, code: str, *args: str, windows: tuple[str, ...] = WINDOWS
) -> HarnessResult:
    script = tmp_path / "prog.py"
    script.write_text(code)
    return watch_cmd(tmp_path / "r", sys.executable, str(script), *args, opts=windows)


# the same deadlock beside heartbeats that a library runs (a package's helper threads, as
# tqdm's monitor or a metrics client keep): their code is in site-packages, not the program's
LIBRARY_HEARTBEAT_DEADLOCK = """
import os, sys, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import beat
""" + deadlock_beside("beat.")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("code", "housekeeping"),
    [
        pytest.param(LIBRARY_HEARTBEAT_DEADLOCK, 2, marks=needs_py_spy, id="library-heartbeat"),
        pytest.param(POPEN_CHATTY, 0, id="popen-chatty"),
    ],
)
def test_real_hangs_get_the_early_verdict(tmp_path: Path, code: str, housekeeping: int) -> None:
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "beat.py").write_text(BEATS)
    res = watch(tmp_path, code)
    report = res.loaded
    v, samples = verdict_of(report), samples_of(report)
    assert res.code == 2, res.stderr
    # a tree with housekeeping threads is never a closed set (a timed thread of the process
    # could wake its futex waiters): whole-tree quiescence calls it; without housekeeping
    # (popen-chatty: a parent in wait4, a child writing a full pipe) the closed set does
    early = Trigger.QUIESCENT if housekeeping else Trigger.CLOSED
    assert (report.trigger, v.kind, v.mechanism) == (early, Kind.HANG, Mechanism.DEADLOCK)
    # housekeeping is proven over 5 s, then the 2 s window (again, when the tracer's attach
    # interrupted a sleeper and the first confirmation failed): far below the 60 s windows
    assert run_s(report) < 30, report.timings
    assert tree_is_gone(exit_pid(report))
    waits = samples.waits
    done = (WaitKind.TREE, WaitKind.DONE, HOUSEKEEPING)
    assert waits and all(w.kind in done for w in waits), waits
    hk = [w for w in waits if w.kind is HOUSEKEEPING]
    assert len(hk) == housekeeping, waits
    for w in hk:  # the evidence names the syscall, the period seen, the CPU and the stack
        # the period as schedstat counts it: a loaded host's preemptions count as runs too
        assert re.search(r"every ~0\.\d\ds", w.what) and "s of CPU" in w.what, w
        assert "only runtime and library code" in w.what and "beat.py" in w.what, w
        assert w.idle, w
        assert any(f"tid {w.tid} not counted" in n for n in samples.notes)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_heartbeat_of_the_programs_own_is_not_housekeeping(tmp_path: Path) -> None:
    # the program's own heartbeat threads (prog.py) beside the deadlock: excused after 5 s by
    # /proc, withdrawn when the stack dump shows their frames; the verdict waits for the
    # window, as before the clause (finding 2.1: such a loop may be polling for anything)
    # windows of 25 s: the 5 s of housekeeping, the 2 s window and the dump's withdrawal
    # must come first, with room for a loaded 2-core host (15 s failed once under load)
    windows = watch_opts(startup=25, stall=25, quiescent=2, timeout=60)
    res = watch(tmp_path, HEARTBEAT_DEADLOCK, windows=windows)
    report = res.loaded
    assert res.code == 2, res.stderr
    assert report.trigger in (Trigger.STARTUP, Trigger.STALL)
    assert verdict_of(report).kind is Kind.HANG
    assert run_s(report) >= 25, report.timings
    notes = samples_of(report).notes
    if shutil.which("py-spy") or os.environ.get("CI"):  # with no stacks: withdrawn as unseen
        assert any("program's own code (heartbeat" in n or "(ticker" in n for n in notes), notes
    assert any("not confirmed after the stack dump" in n for n in notes), notes
    assert not any(w.kind is HOUSEKEEPING for w in samples_of(report).waits)


# a thread in poll(-1) on a pipe only the tree writes, while the main thread joins it: the
# Pool worker handler's shape, in one process
POLL_FOREVER = """
import os, select, threading
r, w = os.pipe()
def handler():
    p = select.poll()
    p.register(r, select.POLLIN)
    p.poll()
t = threading.Thread(target=handler)
t.start()
print("ready", flush=True)
t.join()
"""


def _until_state(pid: int, tid: int, state: str) -> None:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == state:
                return
        time.sleep(0.01)
    raise AssertionError(f"tid {tid} never reached state {state}")


def _quiet_loop(root: subprocess.Popen[bytes], start: float) -> WatchLoop:
    loop = WatchLoop(root.pid, start)
    while loop.quiet_since is None or time.monotonic() - loop.quiet_since < 1.0:
        assert time.monotonic() - start < 15, [w.what for w, _ in loop._waits]
        loop.tick(time.monotonic())
        time.sleep(0.05)
    return loop


@pytest.mark.timeout(60)
def test_an_interrupted_poll_resumed_by_restart_syscall_is_still_on_the_tree() -> None:
    # a real stop and continue interrupts the poll, as a tracer's attach does: the kernel
    # resumes it as restart_syscall with the poll's own arguments
    root = subprocess.Popen([sys.executable, "-c", POLL_FOREVER], stdout=subprocess.PIPE)
    start = time.monotonic()
    try:
        assert root.stdout is not None and root.stdout.readline() == b"ready\n"
        loop = _quiet_loop(root, start)
        tid = next(int(t) for t in os.listdir(f"/proc/{root.pid}/task") if int(t) != root.pid)
        os.kill(root.pid, signal.SIGSTOP)
        _until_state(root.pid, tid, "T")  # a SIGCONT sent before the stop cancels it
        os.kill(root.pid, signal.SIGCONT)
        _until_state(root.pid, tid, "S")
        with open(f"/proc/{root.pid}/task/{tid}/syscall") as f:
            assert f.read().split()[0] == "219" or os.uname().machine != "x86_64"  # restarted
        assert loop.confirm() is None  # the poll continued: nothing moved
        loop.tick(time.monotonic() + 1)
        waits = {w.tid: w for w, _ in loop._waits}
        assert waits[tid].kind == "tree" and "restart_syscall" in waits[tid].what, waits
        assert loop.quiet_since is not None
    finally:
        root.kill()
        root.wait()
    loop.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_that_lost_a_worker_gets_the_early_verdict(tmp_path: Path) -> None:
    report = watch(tmp_path, POOL_LOST_WORKER).loaded
    samples = samples_of(report)
    got = (report.trigger, verdict_of(report).mechanism)
    # its task-queue semaphore is a futex in a shared mapping only the tree maps: a closed
    # set of the wake graph since shared mappings resolve (was whole-tree quiescence)
    assert got == (Trigger.CLOSED, Mechanism.DEADLOCK)
    assert run_s(report) < 20, report.timings  # not the 60 s stall window
    notes = samples.notes
    assert not any("not confirmed" in n for n in notes), notes  # the dump's restart forgiven
    polls = [w for w in samples.waits if w.what.startswith("poll (no timeout)")]
    assert polls and all(w.kind is WaitKind.TREE for w in polls), samples.waits


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_popen_wait_names_the_pipe_and_its_reader(tmp_path: Path) -> None:
    waits = samples_of(watch(tmp_path, POPEN_CHATTY).loaded).waits
    parent = next(w for w in waits if w.on.startswith("child:"))
    child = next(w for w in waits if w.pid != parent.pid)
    assert parent.peers == [child.pid] and parent.on == f"child:{child.pid}"
    assert child.on.startswith("pipe:[") and child.peers == [parent.pid]
    assert "write to a full pipe" in child.what


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "code",
    [
        POOL_SLOW_TASKS,
        POOL_CPU_TASKS,
        SLOW_WRITER,
        PERIODIC_POLL,
        MAIN_SLEEPS_BESIDE_IDLE_POOL,
        FILE_POLL_THREAD,
        POOL_TASKS_POLL,
    ],
    ids=[
        "pool-slow-tasks",
        "pool-cpu-tasks",
        "slow-writer",
        "periodic-poll-thread",
        "main-sleeps-beside-idle-pool",
        "file-poll-thread",
        "pool-tasks-poll",
    ],
)
def test_healthy_look_alikes_are_never_quiescent(tmp_path: Path, code: str) -> None:
    # once each here (the suite's time); their false-verdict rate over repeated runs, with
    # the corpus's look-alikes, is measured by bench/realworld.py --repeat-healthy N
    ready = tmp_path / "ready"  # FILE_POLL_THREAD's file, written from outside the tree
    writer = threading.Timer(14, ready.touch)
    writer.start()
    try:
        res = watch(tmp_path, code, str(ready))
    finally:
        writer.cancel()
    report = res.loaded
    v = verdict_of(report)
    assert (res.code, report.trigger, v.kind) == (0, Trigger.EXIT, Kind.PASS), v
    assert run_s(report) > 5 + 2  # long enough for a false verdict to show


# ---------------------------------------------------------------- the stack check


def stack(tid: int, *frames: Frame, python: bool = True) -> ThreadStack:
    tool = StackToolName.PY_SPY if python else StackToolName.EU_STACK
    return ThreadStack(10, tid, "t", list(frames), tool, python=python)


LIB = "/usr/lib/python3.11/"
HANDLER = [
    Frame("poll", None, f"{LIB}multiprocessing/connection.py", 930),
    Frame("_handle_workers", None, f"{LIB}multiprocessing/pool.py", 522),
    Frame("_bootstrap", None, f"{LIB}threading.py", 995),
]


def test_only_library_frames_keep_a_thread_excused() -> None:
    assert hk.stack_check((10, 12), [stack(12, *HANDLER)], python=True) is None
    gloo = [Frame("epoll_wait", "/lib/libc.so.6"), Frame("loop", "/x/site-packages/libgloo.so")]
    native = stack(12, *gloo, python=False)
    assert hk.stack_check((10, 12), [native], python=True) is None  # a native-only thread
    assert "only runtime and library code" in hk.library_frames((10, 12), [stack(12, *HANDLER)])


def test_the_programs_own_frames_withdraw_the_excuse() -> None:
    own = Frame("poll", None, "/home/me/prog.py", 7, own=True)
    why = hk.stack_check((10, 12), [stack(12, HANDLER[0], own, HANDLER[2])], python=True)
    assert why is not None and "own code (poll at /home/me/prog.py:7)" in why
    # `python -c` code has no file: the program's own as well
    dash_c = Frame("poll", None, "<string>", 4)
    assert hk.stack_check((10, 12), [stack(12, dash_c)], python=True) is not None
    # a C program's own function in a native stack
    mine = Frame("heartbeat", "/home/me/a.out", "/home/me/a.c", 12, own=True)
    assert hk.stack_check((10, 12), [stack(12, mine, python=False)], python=False) is not None
    # a venv inside `harness run`'s own root is still library code
    venv = Frame("poll", None, "/home/me/proj/.venv/lib/python3.11/site-packages/x.py", 3, True)
    assert hk.stack_check((10, 12), [stack(12, venv)], python=True) is None


def test_no_stack_or_an_unseen_python_thread_withdraws_the_excuse() -> None:
    assert "no stack" in (hk.stack_check((10, 12), [], python=True) or "")
    assert hk.stack_check((10, 12), [stack(13, *HANDLER)], python=True) is not None  # another
    assert hk.stack_check((10, 12), [stack(12)], python=True) is not None  # empty
    # in a Python process, a native stack running the interpreter and no Python stack
    interp = [Frame("clock_nanosleep", "/lib/libc.so.6"), Frame("_PyEval_EvalFrameDefault")]
    why = hk.stack_check((10, 12), [stack(12, *interp, python=False)], python=True)
    assert why is not None and "no Python stack" in why


# ---------------------------------------------------------------- the outside scan's cost


def test_the_outside_scan_is_kept_until_the_tree_changes_or_it_is_old() -> None:
    # a real child reading a pipe whose writer is this process, outside the tree
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        reader = ThreadSample(child.pid, "py", "S", "pipe_read", "0", 0.0, [0, 1, 2, 0, 0, 0])
        one = Snapshot(
            0.0, [ProcessSample(child.pid, os.getpid(), "py", "", [], "S", True, [reader])]
        )
        facts = FactReader(refresh_s=0.5)

        def read(s: Snapshot) -> list[int]:
            found = facts.read(s, X86_64, [(child.pid, 0)], [], set())
            return [w for ws in found.outside_writers.values() for w in ws]

        assert os.getpid() in read(one) and facts.scans == 1
        assert os.getpid() in read(one) and facts.scans == 1  # kept: the same tree, young
        other = ProcessSample(99999999, child.pid, "x", "", [], "S", False, [])
        read(Snapshot(0.25, [*one.processes, other]))
        assert facts.scans == 2  # the tree's processes changed: scanned afresh
        time.sleep(0.6)
        assert os.getpid() in read(Snapshot(0.5, [*one.processes, other])) and facts.scans == 3
        facts.reset()  # the confirmation after the dump
        read(Snapshot(0.75, [*one.processes, other]))
        assert facts.scans == 4
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- the watch loop's check

OWN_POLL_THREAD = """
import threading, time

def poll():
    while True:
        time.sleep(0.1)
t = threading.Thread(target=poll)
t.start()
print("ready", flush=True)
t.join()
"""


@pytest.mark.timeout(90)
def test_the_watch_loop_withdraws_an_excused_thread_whose_stack_is_the_programs() -> None:
    root = subprocess.Popen([sys.executable, "-c", OWN_POLL_THREAD], stdout=subprocess.PIPE)
    start = time.monotonic()
    try:
        assert root.stdout is not None and root.stdout.readline() == b"ready\n"
        loop = WatchLoop(root.pid, start)
        # /proc alone: excused after 5 s of looks that agree; on a host loaded five times
        # over (the suite's eight workers beside two busy loops) the 0.1 s loop is often
        # caught waiting for a CPU, and those 5 s took more than 20 s once
        while loop.quiet_since is None:
            assert time.monotonic() - start < 45, [w.what for w, _ in loop._waits]
            loop.tick(time.monotonic())
            time.sleep(0.05)
        tid = next(int(t) for t in os.listdir(f"/proc/{root.pid}/task") if int(t) != root.pid)
        assert [tw.tid for tw, _ in loop._waits if tw.kind == HOUSEKEEPING] == [tid]

        def dump(*frames: Frame) -> SampleSet:
            st = ThreadStack(root.pid, tid, "t", list(frames), StackToolName.PY_SPY, True)
            return sample_set(stacks=[st])

        assert loop.confirm(dump(*HANDLER)) is None  # library frames: it stays excused
        hks = [tw for tw, _ in loop._waits if tw.kind == HOUSEKEEPING]
        assert hks and "only runtime and library code" in hks[0].what
        why = loop.confirm(dump(Frame("poll", None, "<string>", 5), *HANDLER[2:]))
        assert why is not None and "own code" in why
        loop.reset_quiet()
        for _ in range(30):  # 7.5 s of looks: never excused again
            loop.tick(time.monotonic() + 1)
            time.sleep(0.25)
            assert loop.quiet_since is None
        assert loop.confirm(None) is not None  # no stacks: nothing is excused
    finally:
        root.kill()
        root.wait()
    loop.close()


# ---------------------------------------------------------------- between two wake-ups


def _poller(state: str, nr: str, cpu: float) -> ThreadSample:
    args = [0x7FFD, 0, 0, 0, 0, 0] if nr.isdigit() else []
    return ThreadSample(11, "poller", state, "", nr, cpu, syscall_args=args)


def _look(t: float, state: str, cpu: float, nr: str = "230") -> hk.Look:
    """pid 10's poller at time t: asleep in clock_nanosleep (230; or the syscall `nr`, a
    read (0) of fd 0), or runnable ("R")."""
    nr = nr if state == "S" else "running"
    proc = ProcessSample(10, 1, "py", "/py", ["py"], "sleeping", False, [_poller(state, nr, cpu)])
    snap = Snapshot(t=t, processes=[proc])
    [(_, w)] = [(tw, w) for tw, w in tree_waits(snap, X86_64)]
    return hk.Look(snap, {(10, 11): w})


def test_a_timed_loop_caught_runnable_is_still_asleep_on_its_timer() -> None:
    """A lock-file poller that wakes every 50 ms is often runnable at the one look a stall
    verdict reads on a loaded machine: its wait is the sleep it was last seen in (the
    report's waits and the wake chain), so the program is idle, not deadlocked (a flake of
    the corpus's wg-stale-lockfile-poll)."""
    key = (10, 11)
    slept = [_look(0.0, "S", 1.00), _look(0.25, "R", 1.00), _look(0.5, "R", 1.01)]
    found = hk.between_wakeups(slept).get(key)
    assert found is not None and found.kind is WaitKind.TIMED and found.idle
    # it spins: CPU for most of the time since it slept
    assert hk.between_wakeups([_look(0.0, "S", 1.0), _look(1.0, "R", 1.5)]) == {}
    # it slept, but long ago: whatever it does now, it is not between two wake-ups
    assert hk.between_wakeups([_look(0.0, "S", 1.0), _look(3.0, "R", 1.0)]) == {}
    # never seen asleep, or not runnable at the last look
    assert hk.between_wakeups([_look(0.0, "R", 1.0), _look(0.25, "R", 1.0)]) == {}
    assert hk.between_wakeups([_look(0.0, "S", 1.0), _look(0.25, "S", 1.0)]) == {}
    # woken by something else since its sleep (a read of a pipe, say): not a timed loop
    woken = [_look(0.0, "S", 1.0), _look(0.25, "S", 1.0, nr="0"), _look(0.5, "R", 1.0)]
    assert woken[1].waits[key].kind is not WaitKind.TIMED
    assert hk.between_wakeups(woken) == {}
