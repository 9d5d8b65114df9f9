"""Deadlines of timed waits (watch/deadlines.py, docs/quiescence.md "Deadlines"), timer
signals delivered per thread, and futexes in shared mappings: the timeouts read from real
processes' syscalls and memory, a wait past the run's limit judged as untimed and a wait
before it as timed, and the bounds that keep the rule from ever calling a wait late when
it is not."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.sampling import procfs
from harness.sampling.waits import Deadline
from harness.vocab import WaitKind, WakeEnd
from harness.watch import deadlines, wakegraph
from harness.watch.closedwatch import by_key
from harness.watch.watchloop import WatchLoop

pytestmark = pytest.mark.timeout(60)


def _mem(values: dict[int, bytes]) -> deadlines.Read:
    return lambda address, size: values.get(address, b"")[:size] or None


def test_timeouts_are_read_from_the_arguments_and_the_timespecs() -> None:
    ts = struct.pack("<qq", 600, 500_000_000)
    tv = struct.pack("<qq", 7, 250_000)
    read = _mem({0x1000: ts, 0x2000: tv})
    # CPython's time.sleep: clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts)
    got = deadlines.timeout_of("clock_nanosleep", [1, 1, 0x1000, 0, 0, 0], read)
    assert got == deadlines.Timeout(600.5, absolute=True, clock=1)
    # coreutils' sleep: relative on CLOCK_REALTIME
    got = deadlines.timeout_of("clock_nanosleep", [0, 0, 0x1000, 0, 0, 0], read)
    assert got == deadlines.Timeout(600.5, absolute=False, clock=0)
    # glibc's timed waits: FUTEX_WAIT_BITSET is absolute, FUTEX_CLOCK_REALTIME its clock
    got = deadlines.timeout_of("futex", [0x9, 9 | 128 | 256, 0, 0x1000, 0, 0], read)
    assert got == deadlines.Timeout(600.5, absolute=True, clock=0)
    assert deadlines.timeout_of("futex", [0x9, 0 | 128, 0, 0x1000, 0, 0], read) == (
        deadlines.Timeout(600.5, absolute=False)
    )
    assert deadlines.timeout_of("futex", [0x9, 128, 0, 0, 0, 0], read) is None  # untimed
    # poll's milliseconds, -1 forever; select's timeval
    assert deadlines.timeout_of("poll", [0, 1, 3_600_000, 0, 0, 0], read) == (
        deadlines.Timeout(3600.0, absolute=False)
    )
    assert deadlines.timeout_of("poll", [0, 1, 0xFFFFFFFF, 0, 0, 0], read) is None
    assert deadlines.timeout_of("select", [4, 0, 0, 0, 0x2000, 0], read) == (
        deadlines.Timeout(7.25, absolute=False)
    )
    # unreadable memory, a negative timespec, a CPU-time clock: no deadline
    assert deadlines.timeout_of("nanosleep", [0x3000, 0, 0, 0, 0, 0], read) is None
    bad = _mem({0x1000: struct.pack("<qq", -1, 0)})
    assert deadlines.timeout_of("nanosleep", [0x1000, 0, 0, 0, 0, 0], bad) is None
    cpu = deadlines.Timeout(5.0, absolute=True, clock=2)
    assert deadlines.deadline(cpu, None, None) is None


def test_a_relative_timeout_counts_from_the_latest_moment_its_call_can_have_started() -> None:
    now = time.monotonic()
    rel = deadlines.Timeout(600.0, absolute=False)
    # started after the look 2 s ago: it ends no earlier than 598 s from now
    found = deadlines.deadline(rel, now - 2.0, now + 60.0)
    assert found is not None and 597.9 < found.left_s < 598.1 and not found.exact
    assert found.past and "after the run's limit" in found.words()
    # no bound on its start at all: no deadline (never a guess)
    assert deadlines.deadline(rel, None, now + 60.0) is None
    # a deadline before the limit is not past it; no limit, never past
    soon = deadlines.deadline(deadlines.Timeout(30.0, absolute=False), now, now + 60.0)
    assert soon is not None and not soon.past and "before the run's limit" in soon.words()
    assert not Deadline(1e6, exact=True).past
    # read at the wall itself (the limit reached): no "after the run's limit (in -0.0 s)"
    assert Deadline(0.004, exact=True, limit_s=-0.01).words() == "it ends by itself in 0.0 s"


def test_time_namespace_offsets_are_read() -> None:
    assert deadlines.parse_offsets("monotonic 5 500000000\nboottime -2 0\n") == {
        "monotonic": 5.5,
        "boottime": -2.0,
    }
    assert deadlines.parse_offsets(None) == {}


@pytest.fixture
def python_tree(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A Python process whose only child (coreutils `sleep 600`) holds the write end of
    the pipe the parent reads: the shape of a background job holding a caller's pipe."""
    code = textwrap.dedent(
        """
        import os, subprocess, sys
        r, w = os.pipe()
        sleeper = subprocess.Popen(["sleep", "600"], stdout=w)
        os.close(w)
        print(sleeper.pid, flush=True)
        os.read(r, 1)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    yield proc
    for child in procfs.task_children(proc.pid, proc.pid) or []:
        os.kill(child, signal.SIGKILL)
    proc.kill()
    proc.wait()


def _watch(root: int, limit_s: float | None, looks: int = 6) -> WatchLoop:
    """`looks` looks at the tree, and more (up to 10 s) while a thread sits in a
    restart_syscall not seen before (a signal from elsewhere on a loaded host interrupted
    its wait: the next look judges it as the call it continues)."""
    loop = WatchLoop(root, time.monotonic())
    loop.limit_at = None if limit_s is None else time.monotonic() + limit_s
    deadline = time.monotonic() + 10
    for i in range(10_000):
        loop.take()
        fresh = any("not seen before" in w.what for _, w in loop._waits)
        if i + 1 >= looks and (not fresh or time.monotonic() > deadline):
            break
        time.sleep(0.25)
    loop.close()
    return loop


def test_a_sleep_past_the_limit_closes_the_set_with_the_reader(
    python_tree: subprocess.Popen[str],
) -> None:
    assert python_tree.stdout is not None
    sleeper = int(python_tree.stdout.readline())
    loop = _watch(python_tree.pid, limit_s=60.0)
    waits = by_key(loop._waits)
    sleep = waits[(sleeper, sleeper)]
    assert sleep.kind is WaitKind.TREE and sleep.late_s is not None and sleep.late_s > 590
    assert "after the run's limit" in sleep.what
    assert loop.closed_members == {(python_tree.pid, python_tree.pid), (sleeper, sleeper)}
    chain = loop.wake_chain()
    assert chain is not None and chain.end is WakeEnd.LATE and chain.end_pid == sleeper
    assert "(sleep) sleeps" in chain.end_what
    # the same tree under a limit past the sleep's end: a timed wait, no closed set
    loop = _watch(python_tree.pid, limit_s=900.0)
    sleep = by_key(loop._waits)[(sleeper, sleeper)]
    assert (sleep.kind, sleep.late_s) == (WaitKind.TIMED, None)
    assert not loop.closed_members
    # and with no limit at all (harness attach): timed
    loop = _watch(python_tree.pid, limit_s=None)
    assert by_key(loop._waits)[(sleeper, sleeper)].kind is WaitKind.TIMED


def test_a_timed_lock_wait_in_python_is_judged_by_its_absolute_deadline() -> None:
    code = (
        "import threading; l = threading.Lock(); l.acquire(); print(1, flush=True); "
        "l.acquire(timeout=3600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        loop = _watch(proc.pid, limit_s=60.0)
        w = by_key(loop._waits)[(proc.pid, proc.pid)]
        assert w.kind is WaitKind.TREE and w.late_s is not None and 3590 < w.late_s <= 3600
        assert "in about 3600 s, after" in w.what or "in about 3599 s, after" in w.what
        assert loop.closed_members == {(proc.pid, proc.pid)}  # a closed set of one
    finally:
        proc.kill()
        proc.wait()


SIGNALLED = """
import signal, threading, time
signal.signal(signal.SIGALRM, lambda *a: None)  # caught: an alarm may be armed
a, b = threading.Lock(), threading.Lock()
a.acquire()
def worker():
    b.acquire()
    time.sleep(0.2)
    a.acquire()  # held by main: never
t = threading.Thread(target=worker)
t.start()
time.sleep(0.1)
print(t.native_id, flush=True)
if MASKED:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
b.acquire()  # held by the worker: never
"""


@pytest.mark.parametrize("masked", [False, True])
def test_a_caught_timer_signal_wakes_only_the_thread_it_can_be_delivered_to(masked: bool) -> None:
    code = SIGNALLED.replace("MASKED", str(masked))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        time.sleep(0.3)
        loop = _watch(proc.pid, limit_s=60.0)
        waits = by_key(loop._waits)
        main, other = waits[(proc.pid, proc.pid)], waits[(proc.pid, worker)]
        # a process-directed SIGALRM goes to the main thread unless its mask blocks it:
        # then to a thread that does not (the worker)
        assert (main.kind, other.kind) == (
            (WaitKind.TREE, WaitKind.TIMED) if masked else (WaitKind.TIMED, WaitKind.TREE)
        ), (main.what, other.what)
        assert "delivered to this thread" in (other.what if masked else main.what)
    finally:
        proc.kill()
        proc.wait()


def test_a_shared_futex_mapped_outside_the_tree_stays_unresolved(tmp_path: Path) -> None:
    """A futex in a /dev/shm file: while the file has a name, anyone may map it later (not
    resolved); once unlinked, a process outside the tree that maps it may still wake it
    (not resolved); once that process is gone, only the waiter maps it (a closed set)."""
    name = f"/puffer-test-{os.getpid()}"
    code = textwrap.dedent(
        f"""
        import mmap, os, threading
        fd = os.open("/dev/shm{name}", os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 4096)
        m = mmap.mmap(fd, 4096)
        print(os.getpid(), flush=True)
        threading.Event().wait()
        """
    )
    outside = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert outside.stdout is not None and outside.stdout.readline()  # the file is there
    # the waiter: a futex wait (FUTEX_WAIT, shared) on the mapped page's first word
    waiter_code = textwrap.dedent(
        f"""
        import ctypes, mmap, os
        fd = os.open("/dev/shm{name}", os.O_RDWR)
        m = mmap.mmap(fd, 4096)
        addr = ctypes.addressof(ctypes.c_int.from_buffer(m))
        libc = ctypes.CDLL(None, use_errno=True)
        print(1, flush=True)
        if input() == "unlink":
            os.unlink("/dev/shm{name}")
        libc.syscall(202, ctypes.c_void_p(addr), 0, 0, None, None, 0)  # FUTEX_WAIT, shared
        """
    )
    argv = [sys.executable, "-c", waiter_code]
    named = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    waiter = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert named.stdin is not None and named.stdout is not None and named.stdout.readline()
        named.stdin.write("keep\n")
        named.stdin.flush()
        loop = _watch(named.pid, limit_s=60.0)
        w = by_key(loop._waits)[(named.pid, named.pid)]
        assert not w.resolved and "a process may still open or attach it" in w.what, w.what
        assert not loop.closed_members
        named.kill()
        assert waiter.stdin is not None and waiter.stdout is not None and waiter.stdout.readline()
        waiter.stdin.write("unlink\n")
        waiter.stdin.flush()
        loop = _watch(waiter.pid, limit_s=60.0)
        w = by_key(loop._waits)[(waiter.pid, waiter.pid)]
        assert w.kind is WaitKind.TREE and not w.resolved, w.what
        assert f"pid {outside.pid} outside the tree maps it" in w.what
        assert not loop.closed_members
        # once the outside process is gone, only the waiter maps it: a closed set of one
        outside.kill()
        outside.wait()
        loop = _watch(waiter.pid, limit_s=60.0)
        w = by_key(loop._waits)[(waiter.pid, waiter.pid)]
        assert w.resolved and w.wakers == (waiter.pid,), w.what
        assert "mapped only by pid(s)" in w.what
        assert loop.closed_members == {(waiter.pid, waiter.pid)}
    finally:
        for p in (outside, named, waiter):
            p.kill()
            p.wait()
        Path(f"/dev/shm{name}").unlink(missing_ok=True)


def test_a_chain_through_a_shared_futex_ends_at_a_child_that_died_sharing_it() -> None:
    """The death the watch saw, of a child of the mapping's process, comes before the
    nobody (or cycle) it left; a private futex never blames a dead process."""
    from harness.sampling.model import ProcessSample, Snapshot, ThreadSample, WakeLink
    from harness.sampling.waits import Wait
    from harness.vocab import WaitVia

    th = ThreadSample(10, "python", "S", "futex_wait_queue", "202", 0.0, [0, 0, 0, 0, 0, 0])
    snap = Snapshot(1.0, [ProcessSample(10, 1, "python", "", [], "sleeping", True, [th])])
    shared = Wait(WaitKind.TREE, "futex", wakers=(10,), resolved=True, via=WaitVia.FUTEX)
    death = wakegraph.Death(11, 10, "python", "killed by SIGKILL", 0.8)
    got = wakegraph.chain(snap, {(10, 10): shared}, (10, 10), 10, deaths=[death])
    assert got.end is WakeEnd.DEAD and "pid 11 (python), a child of pid 10" in got.end_what
    assert isinstance(got.links[0], WakeLink)
    private = Wait(WaitKind.TREE, "futex", wakers=(10,), resolved=True, private=True)
    got = wakegraph.chain(snap, {(10, 10): private}, (10, 10), 10, deaths=[death])
    assert got.end is WakeEnd.NOBODY
    # a death in another family (its parent maps nothing here) is not blamed
    stranger = wakegraph.Death(12, 99, "python", "killed by SIGKILL", 0.8)
    got = wakegraph.chain(snap, {(10, 10): shared}, (10, 10), 10, deaths=[stranger])
    assert got.end is WakeEnd.NOBODY


# ---------------------------------------------------------------- polling loops

SQLITE_TRACE = """\
fcntl(6, F_SETLK, {l_type=F_RDLCK, l_whence=SEEK_SET, l_start=1073741824, l_len=1}) = 0
newfstatat(AT_FDCWD, "/tmp/x.db-journal", {st_mode=S_IFREG|0644, st_size=512, ...}, 0) = 0
pread64(6, "\\0\\0\\0\\1", 16, 24) = 16
fcntl(6, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=1073741825, l_len=1}) = -1 EAGAIN
clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=100000000}, NULL) = 0
fcntl(6, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=1073741825, l_len=1}) = -1 EAGAIN
clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=0, tv_nsec=100000000}, NULL) = 0
"""
FILELOCK_TRACE = """\
newfstatat(AT_FDCWD, "/tmp/a.lock", {st_mode=S_IFREG|0644, st_size=0, ...}, AT_SYMLINK_NOFOLLOW) = 0
openat(AT_FDCWD, "/tmp/a.lock", O_RDWR|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC) = 4
flock(4, LOCK_EX|LOCK_NB)               = -1 EAGAIN (Resource temporarily unavailable)
close(4)                                = 0
clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, {tv_sec=1964, tv_nsec=619955468}, NULL) = 0
"""


def test_a_trace_tells_the_lock_a_loop_is_refused_and_whether_it_only_checks() -> None:
    from harness.sampling import polltrace

    found = polltrace.parse(SQLITE_TRACE, 1.0)
    assert found.trylocks == {(6, "fcntl", "F_SETLK"): 2} and found.only_checks()
    found = polltrace.parse(FILELOCK_TRACE, 1.0)
    assert found.trylocks == {(4, "flock", "LOCK_EX|LOCK_NB"): 1} and found.only_checks()
    assert found.opened == {4: "/tmp/a.lock"}
    # a loop that also writes has an effect: no reading
    busy = polltrace.parse(FILELOCK_TRACE + 'write(1, "tick\\n", 5) = 5\n', 1.0)
    assert not busy.only_checks()


def test_a_lock_polling_loop_is_resolved_to_the_holders_of_its_lock(tmp_path: Path) -> None:
    from harness.sampling import polltrace
    from harness.watch import pollloops

    path = tmp_path / "a.lock"
    path.write_text("")
    trace = polltrace.parse(FILELOCK_TRACE.replace("/tmp/a.lock", str(path)), 1.0)
    st = path.stat()
    held = {(wakefacts_dev(st.st_dev), st.st_ino): [77]}
    told = pollloops.lock_target(
        os.getpid(), trace, lambda d, i: held.get((d, i)), lambda p, fd: None
    )
    assert told is not None and told[1:3] == (str(path), (77,))
    assert "flock LOCK_EX|LOCK_NB → refused), held by pid 77" in told[0]
    # nobody holds it now (the next try may succeed): no reading
    assert pollloops.lock_target(os.getpid(), trace, lambda d, i: [], lambda p, fd: None) is None


def wakefacts_dev(st_dev: int) -> str:
    from harness.watch.wakefacts import dev_words

    return dev_words(st_dev)


FILELOCK_SELF = """
import filelock, sys
path = sys.argv[1]
outer = filelock.FileLock(path)
with outer:
    print(1, flush=True)
    filelock.FileLock(path).acquire(timeout=600)  # a second open: refused, retried
"""


def test_a_lock_retried_against_its_own_process_is_a_closed_set_of_one(tmp_path: Path) -> None:
    """tox-dev/filelock#315: the loop's lock is held by its own process, whose only thread
    is the loop: nothing could let it go (a real flock LOCK_NB loop, traced for real)."""
    pytest.importorskip("filelock")  # a dependency of torch, installed by setup.sh
    lock = tmp_path / "self.lock"
    argv = [sys.executable, "-c", FILELOCK_SELF, str(lock)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        loop = WatchLoop(proc.pid, time.monotonic())
        loop.limit_at = time.monotonic() + 60.0
        deadline = time.monotonic() + 20  # the trace takes a second; a loaded host more
        while time.monotonic() < deadline and loop.closed_since is None:
            loop.take()
            time.sleep(0.25)
        w = by_key(loop._waits)[(proc.pid, proc.pid)]
        assert w.kind is WaitKind.TREE and w.wakers == (proc.pid,), w.what
        assert f"retries a lock on {lock}" in w.what
        assert loop.closed_members == {(proc.pid, proc.pid)}
        chain = loop.wake_chain()
        assert chain is not None and chain.end is WakeEnd.NOBODY
    finally:
        loop.close()
        proc.kill()
        proc.wait()
