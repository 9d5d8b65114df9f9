"""CPython's GIL as a lock with a holder (sampling/gil.py, watch/pollloops.py): the runtime's
state placed from the ELF's dynamic symbols, the holder read by py-spy, and a real
GIL-versus-mutex deadlock (ceph/ceph#46302's shape) resolved by the watch loop to a cycle,
while a lock wait with a timeout elsewhere in memory is left timed."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.sampling import gil
from harness.vocab import WaitKind, WaitVia, WakeEnd
from harness.watch.closedwatch import by_key
from harness.watch.watchloop import WatchLoop

from .facts import require_tool

CORPUS = Path(__file__).parent / "realworld"
# the interpreters here: this one (pyenv's, with symbols) and Debian's stripped python3,
# where it is installed (its `take_gil` has no symbol; `_PyRuntime` is still exported)
PYTHONS = [sys.executable] + [
    p
    for p in ("/usr/bin/python3",)
    if os.path.exists(p) and os.path.realpath(p) != os.path.realpath(sys.executable)
]


def test_the_runtime_state_is_placed_from_the_dynamic_symbols() -> None:
    start_end = gil.runtime_state(os.getpid())
    assert start_end is not None
    start, end = start_end
    # ctypes finds the same object through the dynamic linker
    assert start == ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    assert end - start > 1000  # the whole struct, its size from the symbol


def test_the_holder_is_read_from_py_spy_json() -> None:
    def dump(*threads: dict[str, object]) -> str:
        return json.dumps(list(threads))

    main = {"os_thread_id": 10, "thread_name": "MainThread", "owns_gil": True}
    worker = {"os_thread_id": 11, "thread_name": "worker", "owns_gil": False}
    assert gil.parse_holder(dump(main, worker)) == gil.GilHolder(10, "MainThread")
    assert gil.parse_holder(dump(worker)) == gil.GilHolder(None)
    both = gil.parse_holder(dump(main, {**worker, "owns_gil": True}))
    assert isinstance(both, str) and "more than one" in both
    assert isinstance(gil.parse_holder("Error: Failed to find python version"), str)
    assert isinstance(gil.parse_holder(dump({**main, "os_thread_id": None})), str)


def _futex_word(pid: int, tid: int) -> int | None:
    """The futex word of the thread's wait (arg0), while it is in the futex syscall."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    except OSError:
        return None
    return int(fields[1], 16) if fields and fields[0] == "202" else None


def _waiting_word(pid: int, tid: int) -> int | None:
    """The futex word of the thread's wait, looked at until it is in one (a GIL waiter
    wakes every 5 ms: a look may find it running)."""
    deadline = time.monotonic() + 5
    while (word := _futex_word(pid, tid)) is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return word


@pytest.fixture(params=PYTHONS)
def gil_deadlock(request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The corpus's tw_gil_held_native_lock.py under each interpreter: (process, the tid of
    the thread that retries the GIL), once both are in their waits."""
    argv = [request.param, str(CORPUS / "tw_gil_held_native_lock.py")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "notify"
        deadline = time.monotonic() + 10
        waiter = None
        while waiter is None and time.monotonic() < deadline:
            time.sleep(0.05)
            tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
            waiter = next((t for t in tids if _futex_word(proc.pid, t) is not None), None)
        assert waiter is not None, "the module thread never waited"
        time.sleep(0.5)  # past its 0.3 s sleep, in take_gil for good
        yield proc, waiter
    finally:
        proc.kill()
        proc.wait()


def test_a_gil_waiter_waits_on_the_runtime_state_and_main_holds_the_gil(
    gil_deadlock: tuple[subprocess.Popen[str], int],
) -> None:
    require_tool("py-spy", why="the GIL's holder is read by py-spy")
    proc, waiter = gil_deadlock
    state = gil.runtime_state(proc.pid)
    assert state is not None
    word, main_word = _waiting_word(proc.pid, waiter), _waiting_word(proc.pid, proc.pid)
    assert word is not None and state[0] <= word < state[1]
    # main waits on the native mutex, a buffer on the heap: not the runtime's state
    assert main_word is not None and not state[0] <= main_word < state[1]
    holder = gil.gil_holder(proc.pid)
    assert holder == gil.GilHolder(proc.pid, "MainThread"), holder


def test_the_watch_loop_closes_the_gil_cycle(
    gil_deadlock: tuple[subprocess.Popen[str], int],
) -> None:
    require_tool("py-spy", why="the GIL's holder is read by py-spy")
    proc, waiter = gil_deadlock
    loop = WatchLoop(proc.pid, time.monotonic())
    loop.limit_at = time.monotonic() + 60.0  # the readings run under a wall limit only
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and loop.closed_since is None:
            loop.take()
            time.sleep(0.25)
        w = by_key(loop._waits)[(proc.pid, waiter)]
        assert w.kind is WaitKind.TREE and w.via is WaitVia.RUNTIME_LOCK, w.what
        assert w.owners == ((proc.pid, proc.pid),)
        assert loop.closed_members == {(proc.pid, proc.pid), (proc.pid, waiter)}
        chain = loop.wake_chain()
        assert chain is not None and chain.end is WakeEnd.CYCLE
    finally:
        loop.close()


TIMED_LOCK = textwrap.dedent(
    """
    import threading
    lock = threading.Lock()
    lock.acquire()
    print("waiting", flush=True)
    lock.acquire(timeout=600)  # a semaphore on the heap, with a timeout
    """
)


def test_a_timed_lock_wait_outside_the_runtime_state_is_not_the_gil() -> None:
    proc = subprocess.Popen([sys.executable, "-c", TIMED_LOCK], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        word, state = _waiting_word(proc.pid, proc.pid), gil.runtime_state(proc.pid)
        assert word is not None and state is not None
        assert not state[0] <= word < state[1]
    finally:
        proc.kill()
        proc.wait()
