"""harness.sampling.locks against real programs: the mutex wait-for graph read from
/proc and the mutexes' own memory, with no debug symbols and no tools. Every program runs
in its own process group, killed at the end of the test by the `spawn` fixture."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.sampling import locks, procfs
from harness.sampling.locks import (
    LockGraph,
    format_cycle,
    lock_graph,
)
from harness.sampling.waits import FutexWait
from harness.vocab import FutexKind
from tests import facts

if TYPE_CHECKING:
    from tests.conftest import Spawned

Spawn = Callable[..., "Spawned"]
FUTEX = locks.FUTEX_SYSCALL.get(platform.machine())

pytestmark = [
    pytest.mark.skipif(FUTEX is None, reason=f"futex waits not read on {platform.machine()}"),
    pytest.mark.timeout(60),
]


def tids_by_name(pid: int) -> dict[str, int]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out[(task / "comm").read_text().strip()] = int(task.name)
    return out


def _futex_threads(pid: int) -> dict[int, tuple[str, str]]:
    """tid → (name, syscall line) of the threads asleep (S) in the futex syscall."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError):
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            call = (task / "syscall").read_text().strip()
            if state == "S" and call.split()[0] == str(FUTEX):
                out[int(task.name)] = ((task / "comm").read_text().strip(), call)
    return out


def wait_in_futex(pid: int, names: tuple[str, ...] = (), count: int = 0) -> None:
    """Wait until the named threads (or `count` threads) sleep in the futex syscall, the
    same wait on two looks 0.1 s apart: a thread prints a moment before it reaches the lock
    it blocks on, and a barrier's sleepers are woken a moment after the last one comes."""
    deadline = time.monotonic() + 10
    before: dict[int, tuple[str, str]] = {}
    while time.monotonic() < deadline:
        now = _futex_threads(pid)
        names_in = {name for name, _ in now.values()}
        if set(names) <= names_in and len(now) >= count and now == before:
            return
        before = now
        time.sleep(0.1)
    pytest.fail(f"threads {names or count} never settled in futex: {before}")


def wait_of(graph: LockGraph, tid: int) -> FutexWait:
    found = [w for w in graph.waits if w.tid == tid]
    assert found, f"tid {tid} not among the waits: {graph.waits}"
    return found[0]


def show(graph: LockGraph) -> str:
    """What the test prints (pytest -s): the cycles as the module formats them."""
    lines = [format_cycle(c) for c in graph.cycles] or ["no cycle"]
    lines += [f"  {w.name} (tid {w.tid}): {w.what}, owner {w.owner}: {w.how}" for w in graph.waits]
    text = "\n".join(lines)
    print(text)
    return text


# ----------------------------------------------------------------------------- cycles


def test_two_mutex_deadlock_is_one_cycle_of_both_threads(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    wait_in_futex(p.pid, ("xfer_a_to_b", "xfer_b_to_a"))
    graph = lock_graph(p.pid)
    show(graph)

    tids = tids_by_name(p.pid)
    a, b = tids["xfer_a_to_b"], tids["xfer_b_to_a"]
    (cycle,) = graph.cycles
    assert {step.tid for step in cycle} == {a, b}
    assert {step.name for step in cycle} == {"xfer_a_to_b", "xfer_b_to_a"}
    assert cycle[0].tid == min(a, b)
    wa, wb = wait_of(graph, a), wait_of(graph, b)
    assert (wa.what, wa.owner, wb.what, wb.owner) == (FutexKind.MUTEX, b, FutexKind.MUTEX, a)
    assert wa.futex != wb.futex and not wa.timed
    assert {s.mutex for s in cycle} == {wa.futex, wb.futex}
    assert "__owner (offset 8)" in wa.how and wa.op_name == "FUTEX_WAIT_PRIVATE"
    main = wait_of(graph, p.pid)  # main joins the first transfer thread
    assert (main.what, main.owner) == (FutexKind.NOT_A_MUTEX, None)
    assert "pthread_join" in main.how and "xfer_a_to_b" in main.how
    assert format_cycle(cycle).count("→ mutex 0x") == 2
    json.dumps([w.__dict__ for w in graph.waits])


@pytest.mark.parametrize(
    ("kind", "what"), [("normal", FutexKind.MUTEX), ("robust", FutexKind.ROBUST_MUTEX)]
)
def test_three_thread_cycle(
    spawn: Spawn, c_program: Callable[[str], Path], kind: str, what: str
) -> None:
    p = spawn([c_program("mutex_cycle3"), kind])
    p.expect("holds", count=3)
    names = ("cycle_t1", "cycle_t2", "cycle_t3")
    wait_in_futex(p.pid, names)
    graph = lock_graph(p.pid)
    show(graph)

    tids = tids_by_name(p.pid)
    (cycle,) = graph.cycles
    assert len(cycle) == 3
    order = [s.name for s in cycle]
    at = order.index("cycle_t1")
    assert order[at:] + order[:at] == list(names)  # t1 wants B, held by t2, ...
    for i, name in enumerate(names):
        w = wait_of(graph, tids[name])
        assert w.what == what, w
        if w.pi_parked:  # the last to lock: the kernel said EDEADLK, glibc parked it
            assert kind == "pi" and w.owner is None and "EDEADLK" in w.how, w
            assert [s.mutex for s in cycle if s.tid == w.tid] == [None]
        else:
            assert w.owner == tids[names[(i + 1) % 3]], w
    parked = [w for w in graph.waits if w.pi_parked]
    assert len(parked) == (1 if kind == "pi" else 0), graph.waits
    if kind != "normal":  # the owner is in the futex word itself
        owned = [w for w in graph.waits if w.owner]
        assert len(owned) >= 2, graph.waits  # the cycle's waits, but a refused PI one
        assert all("the futex word" in w.how for w in owned), graph.waits


def test_three_thread_pi_cycle(spawn: Spawn, c_program: Callable[[str], Path]) -> None:
    """PI mutexes: the kernel refuses the lock that would close the cycle (EDEADLK) and
    glibc parks that thread on a word of its own stack. Which thread is refused depends on
    the order the three locks reach the kernel (under load more than one chain can end
    parked), so the cycle is asserted through the parked thread, not its full order."""
    p = spawn([c_program("mutex_cycle3"), "pi"])
    p.expect("holds", count=3)
    names = ("cycle_t1", "cycle_t2", "cycle_t3")
    wait_in_futex(p.pid, names)
    graph = lock_graph(p.pid)
    show(graph)
    parked = [w for w in graph.waits if w.pi_parked]
    assert parked and all("EDEADLK" in w.how and w.owner is None for w in parked), graph.waits
    [cycle] = graph.cycles
    assert {s.tid for s in cycle} >= {w.tid for w in parked}
    assert len(cycle) >= 2 and all(s.name in names for s in cycle)
    owned = [w for w in graph.waits if w.owner is not None]
    assert owned, graph.waits  # the waits that are not parked name their owner
    assert all(w.what == FutexKind.PI_MUTEX and "the futex word" in w.how for w in owned), (
        graph.waits
    )


def test_tree_finds_the_cycle_in_a_child(
    spawn: Spawn, c_program: Callable[[str], Path], python_exe: str
) -> None:
    code = "import subprocess, sys; subprocess.run([sys.argv[1]])"
    p = spawn([python_exe, "-c", code, c_program("mutex_deadlock")])
    p.expect("holds", count=2)
    time.sleep(0.05)
    (child,) = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
    wait_in_futex(child, ("xfer_a_to_b", "xfer_b_to_a"))

    assert lock_graph(p.pid).cycles == []  # the parent alone: no mutex waits
    graph = lock_graph(p.pid, tree=True)
    show(graph)
    (cycle,) = graph.cycles
    assert {s.tid for s in cycle} == {
        tids_by_name(child)[n] for n in ("xfer_a_to_b", "xfer_b_to_a")
    }
    assert {w.pid for w in graph.waits} == {child}


# ----------------------------------------------------------------------------- no cycle


def test_condition_variable_and_barrier_waits_are_not_mutexes(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    p = spawn([c_program("cond_waiters")])
    p.expect("waits", count=3)
    names = ("cond_wait1", "cond_wait2", "barrier_wait")
    wait_in_futex(p.pid, names)
    graph = lock_graph(p.pid)
    show(graph)

    assert graph.cycles == []
    tids = tids_by_name(p.pid)
    for name in names:
        w = wait_of(graph, tids[name])
        assert (w.what, w.owner) == (FutexKind.NOT_A_MUTEX, None), w
        assert "not a mutex's lock word" in w.how
    assert {w.what for w in graph.waits} == {FutexKind.NOT_A_MUTEX}


def test_mutex_held_by_a_sleeping_thread_is_a_wait_without_cycle(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    p = spawn([c_program("mutex_sleeper")])
    p.expect("waiter wants")
    wait_in_futex(p.pid, ("waiter",))
    graph = lock_graph(p.pid)
    show(graph)

    tids = tids_by_name(p.pid)
    assert graph.cycles == []
    w = wait_of(graph, tids["waiter"])
    assert (w.what, w.owner) == (FutexKind.MUTEX, tids["holder"])
    assert tids["holder"] not in {x.tid for x in graph.waits}  # it sleeps, on no lock


def test_openmp_team_waiting_at_a_barrier_is_not_a_mutex(spawn: Spawn, tmp_path: Path) -> None:
    gcc = facts.require_tool("gcc", why="builds the OpenMP program with -fopenmp")
    src = Path(__file__).parent / "programs" / "omp_stalled_team.c"
    binary = tmp_path / "omp_stalled_team"
    argv = [gcc, "-g", "-O0", "-fopenmp", "-pthread", "-o", str(binary), str(src)]
    built = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if built.returncode != 0:
        facts.missing(f"gcc -fopenmp ({built.stderr.strip()[:200]})", "an OpenMP team to read")
    p = spawn([binary], env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    p.expect("team of 3")
    wait_in_futex(p.pid, count=2)
    graph = lock_graph(p.pid)
    show(graph)

    assert graph.cycles == []
    members = [w for w in graph.waits if w.tid != p.pid]
    assert len(members) == 2
    assert all(w.what == FutexKind.NOT_A_MUTEX and w.owner is None for w in members), members


def test_python_lock_deadlock_has_owner_unknown(
    spawn: Spawn, programs_dir: Path, python_exe: str
) -> None:
    p = spawn([python_exe, programs_dir / "py_deadlock.py"])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    wait_in_futex(p.pid, count=3)  # the two transfers and main's join (comm: "python")
    graph = lock_graph(p.pid)
    show(graph)

    assert graph.cycles == []  # a real deadlock, but CPython's locks have no owner field
    assert len(graph.waits) == 3
    for w in graph.waits:
        assert (w.what, w.owner) == (FutexKind.UNKNOWN, None), w
        assert "CPython locks have no owner field" in w.how


# ----------------------------------------------------------------------------- no ptrace rights


def test_without_ptrace_rights_the_owner_is_unknown_with_the_reason(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    """A forked child drops to `nobody` and reads the deadlocked program's mutex: the
    kernel refuses (EPERM), and the wait says so instead of naming an owner."""
    facts.require_root("drops to another user (nobody) to lose the ptrace rights")
    p = spawn([c_program("mutex_deadlock")])
    p.expect("holds", count=2)
    wait_in_futex(p.pid, ("xfer_a_to_b", "xfer_b_to_a"))
    threads = procfs.read_threads(p.pid)  # read as root: the syscall args
    tid = tids_by_name(p.pid)["xfer_a_to_b"]
    (th,) = [t for t in threads if t.tid == tid]

    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            waits = locks.process_waits(p.pid, threads, python=False)
            graph = lock_graph(p.pid)
            out = {"waits": [w.__dict__ for w in waits], "notes": graph.notes}
            os.write(write_fd, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        got = json.loads(f.read() or b"{}")
    os.waitpid(child, 0)

    (mine,) = [w for w in got["waits"] if w["tid"] == th.tid]
    assert mine["what"] == FutexKind.UNKNOWN and mine["owner"] is None
    assert "EPERM" in mine["how"] and "ptrace rights" in mine["how"], mine["how"]
    assert any("syscall of" in n and "unreadable" in n for n in got["notes"]), got["notes"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-s"]))
