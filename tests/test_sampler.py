"""harness.sampling against real processes: real deadlocks, spins, zombie main threads,
real gdb / eu-stack / py-spy, and the degrade paths (tools missing, ptrace refused,
tool hanging, target exiting mid-sample)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.sampling.frames import FrameContext, MemoryMap
from harness.sampling.model import SampleSet, ThreadStack, to_json
from harness.sampling.parsers import parse_eu_stack, parse_gdb, parse_py_spy
from harness.sampling.sample import sample_tree
from harness.sampling.stacks import MAX_STACK_PROCESSES

if TYPE_CHECKING:
    from tests.conftest import Spawned

Spawn = Callable[..., "Spawned"]
FUTEX_SYSCALL = {"x86_64": "202", "aarch64": "98"}.get(platform.machine(), "")

needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb not installed")
needs_eu_stack = pytest.mark.skipif(shutil.which("eu-stack") is None, reason="no eu-stack")


def _py_spy() -> str | None:
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


needs_py_spy = pytest.mark.skipif(_py_spy() is None, reason="py-spy not installed")


def sample(pid: int, **kwargs: Any) -> SampleSet:
    """sample_tree with test defaults: a short interval, a generous stack timeout."""
    opts: dict[str, Any] = {"snapshots": 3, "interval": 0.25, "stack_timeout": 15.0, **kwargs}
    return sample_tree(pid, **opts)


def threads_of(s: SampleSet, pid: int) -> dict[str, list[str]]:
    """thread name → states across snapshots, for one process."""
    return {a.name: a.states for a in s.activity if a.pid == pid}


def stack_named(s: SampleSet, name: str, source: str) -> ThreadStack:
    found = [st for st in s.stacks if st.name == name and st.source == source]
    assert found, f"no {source} stack for thread {name!r}: {[(x.name, x.source) for x in s.stacks]}"
    return found[0]


def functions(st: ThreadStack) -> list[str]:
    return [f.function for f in st.frames]


def blocked_on_futex(wchan: str, syscall: str) -> bool:
    return "futex" in wchan or (FUTEX_SYSCALL != "" and syscall == FUTEX_SYSCALL)


def path_with(tmp_path: Path, *tools: str) -> str:
    """A directory holding only the named tools, to stand in for PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


# ----------------------------------------------------------------------------- native


@needs_gdb
@pytest.mark.timeout(60)
def settle_blocked(pid: int, names: tuple[str, ...], timeout: float = 5.0) -> None:
    """Wait until the named threads sleep: "holds" is printed a moment before a thread
    reaches its blocking lock, and a snapshot in that moment sees it still running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                name = (task / "comm").read_text().strip()
                states[name] = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        if all(states.get(n) == "S" for n in names):
            return
        time.sleep(0.02)
    pytest.fail(f"threads {names} never blocked: {states}")


def test_mutex_deadlock_blocked_threads_and_gdb_stacks(
    spawn: Spawn, c_program: Callable[[str], Path], programs_dir: Path
) -> None:
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    settle_blocked(p.pid, ("xfer_a_to_b", "xfer_b_to_a"))
    s = sample(p.pid, own_roots=[str(programs_dir)])

    assert s.tools == {"gdb": "used"}, s.notes
    workers = [a for a in s.activity if a.name.startswith("xfer_")]
    assert len(workers) == 2
    for a in workers:
        assert set(a.states) == {"S"}, a
        assert blocked_on_futex(a.wchan, a.syscall), a
        assert a.cpu_fraction < 0.2
    for name, own_fn in (("xfer_a_to_b", "transfer_a_to_b"), ("xfer_b_to_a", "transfer_b_to_a")):
        st = stack_named(s, name, "gdb")
        fns = functions(st)
        assert own_fn in fns
        assert any("lll_lock_wait" in f or "pthread_mutex_lock" in f for f in fns), fns
        own = {f.function for f in st.frames if f.own}
        assert own_fn in own
        assert not any("pthread_mutex_lock" in f or "lll_lock" in f for f in own), own
        frame = st.frames[fns.index(own_fn)]
        assert frame.file is not None and frame.file.endswith("mutex_deadlock.c")
        assert frame.line is not None
    json.dumps(to_json(s))  # the whole set is JSON-able


def _spinner_floor() -> float:
    """The CPU share a spinner must show: most of a core, unless the machine is
    oversubscribed (parallel test sessions), when its fair share is what it gets."""
    ncpu = os.cpu_count() or 1
    load = os.getloadavg()[0]
    return 0.5 if load < ncpu else max(0.15, 0.5 * ncpu / (load + 1))


@needs_gdb
@pytest.mark.timeout(60)
def test_busy_spin_main_thread_burns_cpu(spawn: Spawn, c_program: Callable[[str], Path]) -> None:
    p = spawn([c_program("busy_spin")])
    time.sleep(0.2)  # let it start spinning; the spin itself is real
    s = sample(p.pid)

    (main,) = [a for a in s.activity if a.tid == p.pid]
    assert main.cpu_fraction > _spinner_floor(), main
    assert set(main.states) == {"R"} and main.syscall == "running"
    assert "spin_forever" in functions(stack_named(s, "busy_spin", "gdb"))
    # gdb attached and detached: the spinner must still be running, not left stopped
    time.sleep(0.2)
    assert _state(p.pid) == "R"


@needs_gdb
@pytest.mark.timeout(60)
def test_stopped_process_is_seen_and_left_stopped(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    p = spawn([c_program("busy_spin")])
    time.sleep(0.1)
    os.kill(p.pid, signal.SIGSTOP)  # stopped by someone else: evidence, not ours to undo
    _wait_for_state(p.pid, "T")
    s = sample(p.pid)

    (main,) = [a for a in s.activity if a.tid == p.pid]
    assert set(main.states) == {"T"} and main.cpu_fraction < 0.1
    assert "spin_forever" in functions(stack_named(s, "busy_spin", "gdb"))
    assert not any("SIGCONT" in n for n in s.notes)
    assert _state(p.pid) == "T"


@needs_gdb
@pytest.mark.timeout(60)
def test_exit_blocked_c_main_thread_is_zombie(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    p = spawn([c_program("exit_blocked")])
    p.expect("main exiting")
    time.sleep(0.1)  # pthread_exit completes right after the print
    s = sample(p.pid)

    states = threads_of(s, p.pid)
    (main,) = [a for a in s.activity if a.tid == p.pid]
    assert set(main.states) == {"Z"}, states
    assert set(states["shutdown_wait"]) == {"S"}
    (proc,) = s.snapshots[-1].processes
    assert proc.exe.endswith("exit_blocked")  # read through the live thread, not the zombie
    # gdb is attached through the live thread: a zombie leader must not read as "denied"
    assert s.tools == {"gdb": "used"}, s.notes
    assert "wait_for_shutdown" in functions(stack_named(s, "shutdown_wait", "gdb"))


@needs_gdb
@needs_py_spy
@pytest.mark.timeout(60)
def test_whole_tree_python_parent_and_native_child(
    spawn: Spawn, c_program: Callable[[str], Path], python_exe: str
) -> None:
    code = "import subprocess, sys; subprocess.run([sys.argv[1]])"
    p = spawn([python_exe, "-c", code, c_program("mutex_deadlock")])
    p.expect("transfer_b_to_a holds")
    p.expect("transfer_a_to_b holds")
    s = sample(p.pid)

    procs = {x.pid: x for x in s.snapshots[-1].processes}
    assert len(procs) == 2
    assert procs[p.pid].is_python
    (child,) = [x for x in procs.values() if x.ppid == p.pid]
    assert not child.is_python
    assert s.tools == {"py-spy": "used", "gdb": "used"}, s.notes
    by_source = {(st.pid, st.source) for st in s.stacks}
    assert by_source == {(p.pid, "py-spy"), (p.pid, "gdb"), (child.pid, "gdb")}
    assert "transfer_a_to_b" in functions(stack_named(s, "xfer_a_to_b", "gdb"))


@needs_gdb
@pytest.mark.timeout(60)
def test_stack_collection_is_capped_on_big_trees(
    spawn: Spawn, c_program: Callable[[str], Path]
) -> None:
    n = MAX_STACK_PROCESSES + 2  # children, plus the shell: 3 over the cap
    script = f'for i in $(seq {n}); do "$0" & done; wait'
    p = spawn(["sh", "-c", script, c_program("mutex_deadlock")])
    p.expect("holds", count=2 * n)
    s = sample(p.pid, snapshots=1)

    assert len(s.snapshots[0].processes) == n + 1
    assert any(f"first {MAX_STACK_PROCESSES} of {n + 1}" in note for note in s.notes), s.notes
    assert len({st.pid for st in s.stacks}) == MAX_STACK_PROCESSES
    assert s.tools == {"gdb": "used"}


# ----------------------------------------------------------------------------- python


@needs_py_spy
@pytest.mark.timeout(60)
def test_py_deadlock_py_spy_stacks(spawn: Spawn, programs_dir: Path, python_exe: str) -> None:
    p = spawn([python_exe, programs_dir / "py_deadlock.py"])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    s = sample(p.pid, native="none")

    assert s.tools == {"py-spy": "used"}, s.notes
    (proc,) = s.snapshots[-1].processes
    assert proc.is_python
    for name, fn in (("xfer_a_to_b", "transfer_a_to_b"), ("xfer_b_to_a", "transfer_b_to_a")):
        st = stack_named(s, name, "py-spy")
        assert st.python and st.pid == p.pid
        assert st.tid in {a.tid for a in s.activity}  # py-spy's os thread id is the /proc tid
        top = st.frames[0]
        assert top.function == fn and top.own
        assert top.file is not None and top.file.endswith("py_deadlock.py")
        assert any(f.file and f.file.endswith("threading.py") and not f.own for f in st.frames)
    main = stack_named(s, "MainThread", "py-spy")
    assert "main" in functions(main)


@needs_py_spy
@pytest.mark.timeout(60)
def test_exit_blocked_py_main_in_threading_shutdown(
    spawn: Spawn, programs_dir: Path, python_exe: str
) -> None:
    p = spawn([python_exe, programs_dir / "exit_blocked.py"])
    p.expect("main returning")
    time.sleep(0.2)  # main() has returned; the interpreter is now joining at shutdown
    s = sample(p.pid, native="none")

    main = [st for st in s.stacks if st.tid == p.pid]
    assert main, s.stacks
    assert any("_shutdown" in f for f in functions(main[0])), functions(main[0])
    waiter = stack_named(s, "shutdown_wait", "py-spy")
    assert "wait_for_shutdown" in functions(waiter)


# ----------------------------------------------------------------------------- degrade paths


@needs_eu_stack
@pytest.mark.timeout(60)
def test_path_without_gdb_falls_back_to_eu_stack(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    binary = c_program("mutex_deadlock")
    p = spawn([binary])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    monkeypatch.setenv("PATH", path_with(tmp_path, "eu-stack"))
    s = sample(p.pid)

    assert s.tools == {"gdb": "missing", "eu-stack": "used"}, s.notes
    assert any("gdb not found" in n and "eu-stack" in n for n in s.notes), s.notes
    st = stack_named(s, "xfer_a_to_b", "eu-stack")
    own = [f for f in st.frames if f.own]
    assert [f.function for f in own] == ["transfer_a_to_b"]
    assert own[0].module == str(binary)
    assert own[0].file is not None and own[0].file.endswith("mutex_deadlock.c")


@pytest.mark.timeout(60)
def test_no_native_tool_on_path_proc_only(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    monkeypatch.setenv("PATH", path_with(tmp_path))
    s = sample(p.pid)

    assert s.tools == {"gdb": "missing", "eu-stack": "missing"}
    assert any("/proc only" in n for n in s.notes), s.notes
    assert s.stacks == []
    assert len(threads_of(s, p.pid)) == 3


@pytest.mark.timeout(60)
def test_native_none_takes_no_stacks(spawn: Spawn, c_program: Callable[[str], Path]) -> None:
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    s = sample(p.pid, native="none")

    assert s.stacks == [] and s.tools == {} and s.notes == []
    assert len(s.snapshots) == 3


@pytest.mark.timeout(60)
def test_process_exiting_during_sampling(spawn: Spawn, programs_dir: Path, python_exe: str) -> None:
    p = spawn([python_exe, programs_dir / "slow_printer.py", "0.4"])
    p.expect("step 0")
    s = sample_tree(p.pid, snapshots=4, interval=0.3, stack_timeout=10.0)

    assert s.snapshots[0].processes, "alive at the first snapshot"
    # exited by the last snapshot; a zombie until this test (its parent) reaps it
    assert [x.status for x in s.snapshots[-1].processes] in ([], ["zombie"])
    assert s.stacks == []
    assert not any(v.startswith("failed") for v in s.tools.values()), s.tools


@pytest.mark.timeout(30)
def test_missing_pid_is_not_an_error() -> None:
    pid = 2**22 + 12345  # above the default pid_max: certainly not a process
    s = sample_tree(pid, snapshots=2, interval=0.05)
    assert s.snapshots[0].processes == []
    assert s.stacks == [] and s.activity == []
    assert any(str(pid) in n for n in s.notes)


@needs_gdb
@needs_py_spy
@pytest.mark.timeout(60)
def test_ptrace_denied_is_recorded(spawn: Spawn, programs_dir: Path, python_exe: str) -> None:
    """Another tracer holding the process makes PTRACE_ATTACH fail with EPERM, the same
    refusal as yama's ptrace_scope or a missing CAP_SYS_PTRACE."""
    target = spawn([python_exe, programs_dir / "py_deadlock.py"])
    target.expect("transfer_b_to_a holds")
    target.expect("transfer_a_to_b holds")
    holder = spawn([python_exe, "-c", SEIZE_AND_HOLD, str(target.pid)])
    holder.expect("seized")
    s = sample(target.pid)

    assert s.tools["gdb"] == "ptrace denied", (s.tools, s.notes)
    assert s.tools["py-spy"] == "ptrace denied", (s.tools, s.notes)
    assert any("ptrace denied" in n for n in s.notes)
    # /proc still gives every thread's state (Python 3.11 threads all have comm "python")
    assert len([a for a in s.activity if a.pid == target.pid]) == 3


# PTRACE_SEIZE the leader (it keeps running) and hold it until killed
SEIZE_AND_HOLD = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(0x4206, int(sys.argv[1]), None, None) != 0:
    sys.exit(f"seize failed: errno {ctypes.get_errno()}")
print("seized", flush=True)
time.sleep(120)
"""


@pytest.mark.timeout(60)
def test_hung_tool_is_killed_with_its_group(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 'gdb' that never returns (and has a child) must cost stack_timeout, no more,
    and leave nothing behind."""
    pids = tmp_path / "pids"
    fake = tmp_path / "bin" / "gdb"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")

    started = time.monotonic()
    s = sample_tree(p.pid, snapshots=1, stack_timeout=1.0)
    assert time.monotonic() - started < 5
    assert s.tools["gdb"] == "timeout"
    assert any("timed out" in n for n in s.notes)
    time.sleep(0.2)
    for pid in map(int, pids.read_text().split()):
        assert not _alive(pid), f"tool process {pid} survived"


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_for_state(pid: int, state: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _state(pid) != state:
        assert time.monotonic() < deadline, f"pid {pid} never reached state {state}"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        return _state(pid) != "Z"
    except FileNotFoundError:
        return False


# ----------------------------------------------------------------------------- programs


@pytest.mark.timeout(30)
def test_segv_program_crashes_after_printing(c_program: Callable[[str], Path]) -> None:
    done = subprocess.run([c_program("segv")], capture_output=True, text=True, timeout=10)
    assert done.stdout == "loading config\n"
    assert done.returncode == -signal.SIGSEGV


@pytest.mark.timeout(30)
def test_slow_printer_progresses_and_exits(programs_dir: Path, python_exe: str) -> None:
    argv = [python_exe, str(programs_dir / "slow_printer.py"), "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == "done" and len(lines) >= 4


# ----------------------------------------------------------------------------- parsers


def test_parse_gdb_variants() -> None:
    text = """\
[New LWP 11]
Thread 2 (Thread 0x7f00 (LWP 11) "worker"):
#0  0x00007f0000001000 in __lll_lock_wait () from /lib/x86_64-linux-gnu/libc.so.6
#1  0x0000550000001100 in step_env (env=0x1, n=(struct {...}) {a = 1}) at /src/env.c:42
#2  <signal handler called>
#3  0x0000000000000000 in ?? ()
Thread 1 (process 10):
#0  main () at /src/main.c:7
Backtrace stopped: previous frame inner to this frame (corrupt stack?)
"""
    maps = MemoryMap([(0x550000000000, 0x550000002000, "/src/trainer")])
    ctx = FrameContext(exe="/src/trainer", names={10: "trainer"}, maps=maps)
    worker, main = parse_gdb(text, 10, ctx)
    assert (worker.tid, worker.name, main.tid, main.name) == (11, "worker", 10, "trainer")
    lock, step, handler, unknown = worker.frames
    assert (lock.function, lock.module, lock.own) == ("__lll_lock_wait", lock.module, False)
    assert lock.module == "/lib/x86_64-linux-gnu/libc.so.6"
    assert (step.function, step.file, step.line, step.own) == ("step_env", "/src/env.c", 42, True)
    assert step.module == "/src/trainer"
    assert handler.function == "<signal handler called>"
    assert unknown.function == "??" and not unknown.own
    assert main.frames[0].function == "main"
    assert not main.frames[0].own  # no address, no module: own only via own_roots
    rooted = FrameContext(own_roots=("/src",))
    assert parse_gdb(text, 10, rooted)[1].frames[0].own


def test_parse_eu_stack() -> None:
    text = """\
PID 10 - process
TID 10:
#0  0x00007f14a1ddcf16 __futex_abstimed_wait_common64 - /usr/lib/x86_64-linux-gnu/libc.so.6
    ./nptl/futex-internal.c:57:12
#1  0x000055d3e3bcc3a1 main - /tmp/pb/prog
    /src/prog.c:48:5
TID 11:
"""
    (st,) = parse_eu_stack(text, 10, FrameContext(exe="/tmp/pb/prog", names={10: "prog"}))
    assert (st.tid, st.name, st.source) == (10, "prog", "eu-stack")
    futex, main = st.frames
    assert futex.module == "/usr/lib/x86_64-linux-gnu/libc.so.6" and not futex.own
    assert (main.function, main.file, main.line, main.own) == ("main", "/src/prog.c", 48, True)


def test_parse_py_spy_python_and_native_frames() -> None:
    text = json.dumps(
        [
            {
                "pid": 5,
                "os_thread_id": 6,
                "thread_name": "MainThread",
                "frames": [
                    {"name": "0x7f01", "filename": "/lib/libc.so.6", "module": "/lib/libc.so.6"},
                    {"name": "train", "filename": "/home/u/proj/train.py", "line": 3},
                    {"name": "run", "filename": "/usr/lib/python3.11/threading.py", "line": 9},
                    {"name": "f", "filename": "/v/lib/python3.11/site-packages/x/y.py"},
                    {"name": "<module>", "filename": "<frozen runpy>"},
                ],
            }
        ]
    )
    (st,) = parse_py_spy(text, 5, FrameContext(exe="/usr/bin/python3.11", python_exe=True))
    assert st.python and (st.pid, st.tid, st.name) == (5, 6, "MainThread")
    assert [f.own for f in st.frames] == [False, True, False, False, False]
    assert st.frames[0].module == "/lib/libc.so.6"
