"""harness.sampling against real processes: real deadlocks, spins, zombie main threads,
real eu-stack / gdb / py-spy, and the degrade paths (tools missing or failing, ptrace
refused, tool hanging, target exiting mid-sample); the parsers on real tool output."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.process.tools import ToolResult, run_tool
from harness.sampling import stacks
from harness.sampling import tools as stack_tools
from harness.sampling.frames import FrameContext, MemoryMap, is_inline
from harness.sampling.model import SampleSet, ThreadStack, to_json
from harness.sampling.parsers import (
    eu_stack_addresses,
    parse_addr2line,
    parse_eu_stack,
    parse_gdb,
    parse_py_spy,
)
from harness.sampling.sample import sample_tree
from harness.sampling.stacks import MAX_STACK_PROCESSES, stack_workers
from harness.vocab import StackToolKind, StackToolName
from tests.samples import sample_set

if TYPE_CHECKING:
    from tests.conftest import Spawned

Spawn = Callable[..., "Spawned"]
DATA = Path(__file__).resolve().parent / "data"
FUTEX_SYSCALL = {"x86_64": "202", "aarch64": "98"}.get(platform.machine(), "")

# setup.sh installs all three: a missing one skips here and fails under CI (tests/conftest.py)
needs_gdb = pytest.mark.needs_tool("gdb", why="gdb stacks")
needs_eu_stack = pytest.mark.needs_tool("eu-stack", why="eu-stack stacks")
needs_py_spy = pytest.mark.needs_tool("py-spy", why="Python stacks")


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


def tool_runs(s: SampleSet) -> dict[int, list[str]]:
    """pid → the tools run on it, from the "TOOL:PID" timings collect_stacks records."""
    out: dict[int, list[str]] = {}
    for key in s.timings:
        tool, _, pid = key.rpartition(":")
        if tool and pid.isdigit():
            out.setdefault(int(pid), []).append(tool)
    return {pid: sorted(tools) for pid, tools in out.items()}


def attaches(s: SampleSet) -> dict[int, list[str]]:
    """pid → the tools that attached to it (eu-addr2line reads files, it does not attach)."""
    return {pid: [t for t in tools if t != "eu-addr2line"] for pid, tools in tool_runs(s).items()}


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


@needs_gdb
@pytest.mark.timeout(60)
def test_mutex_deadlock_blocked_threads_and_gdb_stacks(
    spawn: Spawn, c_program: Callable[[str], Path], programs_dir: Path
) -> None:
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    settle_blocked(p.pid, ("xfer_a_to_b", "xfer_b_to_a"))
    s = sample(p.pid, own_roots=[str(programs_dir)], native="gdb")

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


@needs_eu_stack
@pytest.mark.timeout(60)
def test_busy_spin_main_thread_burns_cpu(spawn: Spawn, c_program: Callable[[str], Path]) -> None:
    p = spawn([c_program("busy_spin")])
    time.sleep(0.2)  # let it start spinning; the spin itself is real
    s = sample(p.pid)

    (main,) = [a for a in s.activity if a.tid == p.pid]
    assert main.cpu_fraction > _spinner_floor(), main
    assert set(main.states) == {"R"} and main.syscall == "running"
    assert "spin_forever" in functions(stack_named(s, "busy_spin", "eu-stack"))
    # eu-stack attached and detached: the spinner must still be running, not left stopped
    time.sleep(0.2)
    assert _state(p.pid) == "R"


@needs_eu_stack
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
    assert "spin_forever" in functions(stack_named(s, "busy_spin", "eu-stack"))
    assert not any("SIGCONT" in n for n in s.notes)
    assert _state(p.pid) == "T"


@needs_eu_stack
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
    # eu-stack is attached through the live thread: a zombie leader must not read as
    # "denied", nor its unwinding refusal as a partial dump
    assert s.tools == {"eu-stack": "used"}, s.notes
    assert not any("partial" in n for n in s.notes), s.notes
    assert "wait_for_shutdown" in functions(stack_named(s, "shutdown_wait", "eu-stack"))


@needs_eu_stack
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
    assert s.tools == {"py-spy": "used", "eu-stack": "used"}, s.notes
    by_source = {(st.pid, st.source) for st in s.stacks}
    assert by_source == {(p.pid, "py-spy"), (p.pid, "eu-stack"), (child.pid, "eu-stack")}
    assert "transfer_a_to_b" in functions(stack_named(s, "xfer_a_to_b", "eu-stack"))
    # the Python process: its Python frames from py-spy, one Python and one native dump
    main = [st for st in s.stacks if st.pid == p.pid and st.source == "py-spy"]
    assert main and main[0].python and main[0].frames[-1].function == "<module>"
    assert attaches(s) == {p.pid: ["eu-stack", "py-spy"], child.pid: ["eu-stack"]}


@needs_eu_stack
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
    assert s.tools == {"eu-stack": "used"}
    assert len(attaches(s)) == MAX_STACK_PROCESSES
    assert all(tools == ["eu-stack"] for tools in attaches(s).values())


@needs_eu_stack
@pytest.mark.timeout(60)
def test_default_native_stacks_are_eu_stack_with_lines_and_inlines(
    spawn: Spawn, c_program: Callable[[str], Path], programs_dir: Path
) -> None:
    binary = c_program("threads64")
    p = spawn([binary, "8"])
    p.expect("all 8 waiting")
    s = sample(p.pid, snapshots=1)

    assert s.tools == {"eu-stack": "used"}, s.notes
    assert attaches(s) == {p.pid: ["eu-stack"]}
    pool = [st for st in s.stacks if st.name.startswith("pool_")]
    assert len(pool) == 8 and {st.source for st in pool} == {"eu-stack"}
    fns = functions(pool[0])
    # wait_for_work is always_inline: a frame of its own, marked, at its own line
    inlined = pool[0].frames[fns.index("wait_for_work")]
    caller = pool[0].frames[fns.index("pool_worker")]
    assert fns.index("pool_worker") == fns.index("wait_for_work") + 1
    assert is_inline(inlined) and not is_inline(caller)
    source = (programs_dir / "threads64.c").read_text().splitlines()
    assert inlined.file == str(programs_dir / "threads64.c") and inlined.line is not None
    assert "pthread_cond_wait(&never" in source[inlined.line - 1]
    assert caller.file == inlined.file and caller.line is not None
    assert "wait_for_work();" in source[caller.line - 1]  # the call site
    assert inlined.own and caller.own and inlined.module == caller.module == str(binary)
    assert any("pthread_cond_wait" in f for f in fns), fns
    saved = json.loads(json.dumps(to_json(s)))["stacks"][s.stacks.index(pool[0])]
    assert saved["frames"][fns.index("wait_for_work")]["inline"] is True


@needs_eu_stack
@pytest.mark.timeout(60)
def test_without_eu_addr2line_eu_stack_names_frames_itself(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    programs_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No eu-addr2line: one `eu-stack -a -m -s -i` names the frames while attached; the
    same functions, lines and inlined frames."""
    binary = c_program("threads64")
    p = spawn([binary, "4"])
    p.expect("all 4 waiting")
    monkeypatch.setenv("PATH", path_with(tmp_path, "eu-stack"))
    s = sample(p.pid, snapshots=1)

    assert s.tools == {"eu-stack": "used"}, s.notes
    assert tool_runs(s) == {p.pid: ["eu-stack"]}
    worker = stack_named(s, "pool_0", "eu-stack")
    fns = functions(worker)
    inlined, caller = (
        worker.frames[fns.index("wait_for_work")],
        worker.frames[fns.index("pool_worker")],
    )
    assert is_inline(inlined) and not is_inline(caller)
    assert inlined.file == caller.file == str(programs_dir / "threads64.c")
    source = (programs_dir / "threads64.c").read_text().splitlines()
    assert inlined.line and "pthread_cond_wait(&never" in source[inlined.line - 1]
    assert caller.line and "wait_for_work();" in source[caller.line - 1]


@needs_eu_stack
@needs_py_spy
@pytest.mark.timeout(60)
def test_tree_dumped_in_parallel_each_pid_once_per_tool(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    python_exe: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python parent and three native children: each child gets one eu-stack, the
    parent one py-spy (no --native) then one eu-stack, never two tools on one pid at
    once, and different pids at the same time when there are CPUs for it."""
    calls: list[tuple[str, int, list[str], float, float]] = []

    def recording_run_tool(argv: list[str], timeout: float) -> ToolResult:
        start = time.monotonic()
        result = run_tool(argv, timeout)
        flag = "--pid" if "--pid" in argv else "-p"
        pid = int(argv[argv.index(flag) + 1])
        calls.append((Path(argv[0]).name, pid, argv, start, time.monotonic()))
        return result

    monkeypatch.setattr(stacks, "run_tool", recording_run_tool)
    code = "import subprocess as s, sys; [p.wait() for p in [s.Popen(sys.argv[1:]) for _ in 'abc']]"
    p = spawn([python_exe, "-c", code, c_program("threads64"), "16"])
    p.expect("all 16 waiting", count=3)
    s = sample(p.pid, snapshots=1)

    children = [x.pid for x in s.snapshots[-1].processes if x.ppid == p.pid]
    assert len(children) == 3
    assert s.tools == {"py-spy": "used", "eu-stack": "used"}, s.notes
    expected = {p.pid: ["eu-stack", "py-spy"], **{c: ["eu-stack"] for c in children}}
    assert attaches(s) == expected
    # eu-addr2line (possibly several runs, modules split among spare CPUs) names frames
    # without attaching: one run per attach, and nothing else, on each pid
    ran = {pid: sorted({t for t, q, *_ in calls if q == pid}) for pid in expected}
    assert ran == tool_runs(s) == {pid: sorted([*t, "eu-addr2line"]) for pid, t in expected.items()}
    (py_spy,) = [argv for tool, _, argv, _, _ in calls if tool == "py-spy"]
    assert "--native" not in py_spy
    for pid in expected:  # the attaches one at a time on each pid, in this order
        mine = sorted((start, end, tool) for tool, q, _, start, end in calls if q == pid)
        attached = [x for x in mine if x[2] != "eu-addr2line"]
        python_first = ["py-spy"] if pid == p.pid else []
        assert [t for _, _, t in attached] == [*python_first, "eu-stack"]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(attached))
        assert all(x[0] >= attached[-1][1] for x in mine if x[2] == "eu-addr2line")
    if stack_workers() >= 2:
        spans = [(start, end) for _, _, _, start, end in calls]
        assert any(a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a != b), calls


def test_stack_workers_cpu_count_and_cgroup_quota(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert stack_workers(str(tmp_path)) == cpus  # no cgroup files: the CPUs
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert stack_workers(str(tmp_path)) == cpus
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 at once
    assert stack_workers(str(tmp_path)) == min(cpus, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert stack_workers(str(tmp_path)) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert stack_workers(str(tmp_path)) == 1


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


@needs_gdb
@pytest.mark.timeout(60)
def test_path_without_eu_stack_falls_back_to_gdb(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    binary = c_program("mutex_deadlock")
    p = spawn([binary])
    p.expect("transfer_a_to_b holds")
    p.expect("transfer_b_to_a holds")
    monkeypatch.setenv("PATH", path_with(tmp_path, "gdb"))
    s = sample(p.pid)

    assert s.tools == {"eu-stack": "missing", "gdb": "used"}, s.notes
    assert any("eu-stack not found" in n and "gdb" in n for n in s.notes), s.notes
    st = stack_named(s, "xfer_a_to_b", "gdb")
    own = [f for f in st.frames if f.own]
    assert [f.function for f in own] == ["transfer_a_to_b"]
    assert own[0].module == os.path.realpath(binary)  # from /proc/PID/maps
    assert own[0].file is not None and own[0].file.endswith("mutex_deadlock.c")


@needs_gdb
@pytest.mark.timeout(60)
def test_eu_stack_failing_outright_falls_back_to_gdb(
    spawn: Spawn,
    c_program: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An eu-stack that shows no frame at all (exit 2, as when it cannot read the
    process's modules) leaves the native side to gdb, noted; one attempt each."""
    fake = Path(path_with(tmp_path, "gdb")) / "eu-stack"
    complaint = "eu-stack: dwfl_linux_proc_report pid 1: broken"
    fake.write_text(f"#!/bin/sh\necho '{complaint}' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")
    s = sample(p.pid, snapshots=1)

    assert s.tools["gdb"] == "used", (s.tools, s.notes)
    assert s.tools["eu-stack"].startswith("failed: eu-stack: dwfl_linux_proc_report"), s.tools
    assert any("eu-stack failed, trying gdb" in n for n in s.notes), s.notes
    assert {st.source for st in s.stacks} == {"gdb"}
    assert attaches(s) == {p.pid: ["eu-stack", "gdb"]}


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


@needs_eu_stack
@needs_py_spy
@pytest.mark.timeout(60)
def test_ptrace_denied_is_recorded(spawn: Spawn, programs_dir: Path, python_exe: str) -> None:
    """Another tracer holding every thread makes PTRACE_ATTACH fail with EPERM, the same
    refusal as yama's ptrace_scope or a missing CAP_SYS_PTRACE."""
    target = spawn([python_exe, programs_dir / "py_deadlock.py"])
    target.expect("transfer_b_to_a holds")
    target.expect("transfer_a_to_b holds")
    holder = spawn([python_exe, "-c", SEIZE_AND_HOLD, str(target.pid), "all"])
    holder.expect("seized")
    s = sample(target.pid)

    assert s.tools["eu-stack"] == "ptrace denied", (s.tools, s.notes)
    assert s.tools["py-spy"] == "ptrace denied", (s.tools, s.notes)
    assert "gdb" not in s.tools  # a refusal is no failure: gdb would be refused as well
    assert any("ptrace denied" in n for n in s.notes)
    # /proc still gives every thread's state (Python 3.11 threads all have comm "python")
    assert len([a for a in s.activity if a.pid == target.pid]) == 3


@needs_eu_stack
@pytest.mark.timeout(60)
def test_one_thread_held_by_another_tracer_is_a_partial_dump(
    spawn: Spawn, c_program: Callable[[str], Path], python_exe: str
) -> None:
    """eu-stack attaches thread by thread: a thread another tracer holds is refused, the
    others are dumped, and the refusal is noted."""
    target = spawn([c_program("mutex_deadlock")])
    target.expect("transfer_a_to_b holds")
    target.expect("transfer_b_to_a holds")
    holder = spawn([python_exe, "-c", SEIZE_AND_HOLD, str(target.pid)])
    holder.expect("seized")
    s = sample(target.pid, snapshots=1)

    assert s.tools == {"eu-stack": "used"}, s.notes
    assert any(
        f"eu-stack partial on pid {target.pid}" in n and "not permitted" in n for n in s.notes
    )
    assert {st.name for st in s.stacks} == {"xfer_a_to_b", "xfer_b_to_a"}  # not the leader


# PTRACE_SEIZE the leader (or with "all" every thread; they keep running) and hold on
SEIZE_AND_HOLD = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
tids = sorted(map(int, os.listdir(f"/proc/{pid}/task"))) if sys.argv[2:] == ["all"] else [pid]
for tid in tids:
    if libc.ptrace(0x4206, tid, None, None) != 0:
        sys.exit(f"seize {tid} failed: errno {ctypes.get_errno()}")
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
    """An 'eu-stack' that never returns (and has a child) must cost stack_timeout, no
    more, and leave nothing behind; a timeout is no failure: gdb is not tried after it."""
    pids = tmp_path / "pids"
    fake = tmp_path / "bin" / "eu-stack"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    p = spawn([c_program("mutex_deadlock")])
    p.expect("transfer_a_to_b holds")

    started = time.monotonic()
    s = sample_tree(p.pid, snapshots=1, stack_timeout=1.0)
    assert time.monotonic() - started < 5
    assert s.tools == {"eu-stack": "timeout"}, s.notes
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


def test_the_registry_orders_the_tools_and_derives_the_choices() -> None:
    names = [t.name for t in stack_tools.TOOLS]
    assert names == [StackToolName.EU_STACK, StackToolName.GDB, StackToolName.PY_SPY]
    assert stack_tools.choices(StackToolKind.NATIVE) == ["auto", "eu-stack", "gdb", "none"]
    assert stack_tools.choices(StackToolKind.PYTHON) == ["auto", "py-spy", "none"]
    assert [t.name for t in stack_tools.wanted(StackToolKind.NATIVE, "auto")] == names[:2]
    assert [t.name for t in stack_tools.wanted(StackToolKind.NATIVE, "gdb")] == [StackToolName.GDB]
    assert stack_tools.wanted(StackToolKind.PYTHON, "none") == ()
    with pytest.raises(ValueError, match="not one of auto, eu-stack, gdb, none"):
        stack_tools.wanted(StackToolKind.NATIVE, "py-spy")
    assert stack_tools.auto_text(StackToolKind.NATIVE) == "eu-stack, else gdb"


def test_each_tool_parses_what_its_command_line_asks_for() -> None:
    """The records tie argv to parser: eu-stack -q output goes with eu-addr2line's names."""
    eu = stack_tools.by_name(StackToolName.EU_STACK)
    assert eu.argv(stack_tools.Invocation("/x/eu-stack", 42, named=True))[-1] == "-q"
    assert eu.argv(stack_tools.Invocation("/x/eu-stack", 42))[-2:] == ["-s", "-i"]
    py = stack_tools.by_name(StackToolName.PY_SPY)
    assert "--native" in py.argv(stack_tools.Invocation("/x/py-spy", 5, py_native=True))
    assert "--native" not in py.argv(stack_tools.Invocation("/x/py-spy", 5))
    gdb = stack_tools.by_name(StackToolName.GDB)
    text = "Thread 1 (LWP 10):\n#0  0x0000000000401136 in spin () at prog.c:3\n"
    (st,) = gdb.parse(stack_tools.Dump("", text, 10, FrameContext()))  # gdb's stderr counts
    assert (st.tid, st.source, st.frames[0].function) == (10, StackToolName.GDB, "spin")
    json_dump = '[{"pid": 5, "os_thread_id": 5, "thread_name": "MainThread", "frames": []}]'
    (st,) = py.parse(stack_tools.Dump(json_dump, "py-spy: warning", 5, FrameContext()))
    assert (st.source, st.python) == (StackToolName.PY_SPY, True)


def test_plan_follows_the_registry_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", path_with(tmp_path, "gdb", "eu-stack", "eu-addr2line"))
    result = sample_set()
    plan = stacks.plan_tools("auto", "none", result)
    available = [t.name for t in stack_tools.of_kind(StackToolKind.NATIVE) if shutil.which(t.name)]
    assert [t.name for t in plan.native] == available
    assert plan.python is None and plan.python_wanted == ()
    if available[:1] == [StackToolName.EU_STACK]:
        assert plan.named(plan.native[0]) is (shutil.which("eu-addr2line") is not None)
    assert result.tools == ({} if available[:1] == ["eu-stack"] else {"eu-stack": "missing"})


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
    assert (lock.function, lock.module, lock.own) == (
        "__lll_lock_wait",
        "/lib/x86_64-linux-gnu/libc.so.6",
        False,
    )
    assert (step.function, step.file, step.line, step.own) == ("step_env", "/src/env.c", 42, True)
    assert step.module == "/src/trainer"
    assert handler.function == "<signal handler called>"
    assert unknown.function == "??" and not unknown.own
    assert main.frames[0].function == "main"
    assert not main.frames[0].own  # no address, no module: own only via own_roots
    rooted = FrameContext(own_roots=("/src",))
    assert parse_gdb(text, 10, rooted)[1].frames[0].own


# threads64's pool worker as both captures of eu-stack show it (built with -g -O0 as
# /tmp/t64/threads64): (function, line, inlined into the next frame, the program's own)
THREADS64_WORKER = [
    ("__futex_abstimed_wait_common64", 57, True, False),  # inlined into the next
    ("__futex_abstimed_wait_common", 87, False, False),
    ("__pthread_cond_wait_common", 503, True, False),
    ("___pthread_cond_wait", 618, False, False),
    ("wait_for_work", 20, True, True),  # always_inline, at its own line
    ("pool_worker", 25, False, True),  # at the call site of wait_for_work
    ("start_thread", 442, False, False),
    ("__clone3", 81, False, False),
]


def test_parse_eu_stack_named_by_eu_addr2line_real_output() -> None:
    """tests/data/eu_stack_q_threads64.txt: `eu-stack -q -a -m -p PID` on threads64 4
    (built -g -O0 as /tmp/t64/threads64); eu_addr2line_threads64.txt: `eu-addr2line -p PID
    -a -f -i -C --pretty-print` of its eu_stack_addresses; both captured here."""
    dump = (DATA / "eu_stack_q_threads64.txt").read_text()
    names = parse_addr2line((DATA / "eu_addr2line_threads64.txt").read_text())
    by_module = eu_stack_addresses(dump)
    assert sorted(by_module) == ["/tmp/t64/threads64", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    addresses = sorted(a for group in by_module.values() for a in group)
    assert sorted(names) == addresses  # every distinct frame address, return addresses - 1
    assert 0x55D58FE6624A in addresses and 0x55D58FE6624B not in addresses
    # one eu-addr2line run per big module (spare CPUs permitting), small ones ride along
    libc, exe = by_module["/usr/lib/x86_64-linux-gnu/libc.so.6"], by_module["/tmp/t64/threads64"]
    big = {"/usr/lib/x86_64-linux-gnu/libc.so.6": 2 << 20, "/tmp/t64/threads64": 2 << 20}
    assert sorted(stacks._split_modules(by_module, 4, big.__getitem__)) == sorted([libc, exe])
    assert stacks._split_modules(by_module, 1, big.__getitem__) == [addresses]
    small = {"/usr/lib/x86_64-linux-gnu/libc.so.6": 2 << 20, "/tmp/t64/threads64": 20_000}
    assert stacks._split_modules(by_module, 4, small.__getitem__) == [addresses]
    assert names[0x55D58FE6624A] == [
        ("wait_for_work", "/work/main/tests/programs/threads64.c", 20),
        ("pool_worker", "/work/main/tests/programs/threads64.c", 25),
    ]
    assert names[0x55D58FE66130] == [("_start", None, None)]  # no line: ??:0

    ctx = FrameContext(exe="/tmp/t64/threads64", names={25436: "pool_0"})
    main, worker, *_ = parse_eu_stack(dump, 25434, ctx, names)
    assert worker.name == "pool_0" and worker.source == "eu-stack"
    rows = [(f.function, f.line, is_inline(f), f.own) for f in worker.frames]
    assert rows == THREADS64_WORKER
    assert {f.module for f in worker.frames[4:6]} == {"/tmp/t64/threads64"}
    assert worker.frames[0].module == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert [f.function for f in main.frames] == [
        "__futex_abstimed_wait_common64",
        "__futex_abstimed_wait_common",
        "__pthread_clockjoin_ex",
        "main",
        "__libc_start_call_main",
        "__libc_start_main_impl",
        "_start",
    ]
    # unnamed (eu-addr2line failed): every frame still has its module
    bare = parse_eu_stack(dump, 25434, ctx)[1]
    assert [f.function for f in bare.frames] == ["??"] * 5 and bare.frames[2].own


def test_parse_addr2line_variants() -> None:
    text = """\
0x00007fda7b9f8306: thread_main at ??:0
0x00007f8da92595d7: pthread_cond_wait@@GLIBC_2.3.2 at ??:0
0x0000000000000001: ?? at ??:0
0x0000000000401000: ns::Pool::run(int) at /src/pool.cc:12
 (inlined by) worker at /src/pool.cc:40:3
"""
    names = parse_addr2line(text)
    assert names[0x7FDA7B9F8306] == [("thread_main", None, None)]
    assert names[0x7F8DA92595D7] == [("pthread_cond_wait", None, None)]
    assert names[1] == [("??", None, None)]
    assert names[0x401000] == [
        ("ns::Pool::run(int)", "/src/pool.cc", 12),
        ("worker", "/src/pool.cc", 40),
    ]


def test_parse_eu_stack_real_output_source_lines_and_inlines() -> None:
    """tests/data/eu_stack_threads64.txt: `eu-stack -a -m -s -i -p PID` on threads64 4
    (built with -g -O0 as /tmp/t64/threads64), captured here."""
    text = (DATA / "eu_stack_threads64.txt").read_text()
    ctx = FrameContext(exe="/tmp/t64/threads64", names={3541: "pool_0"})
    parsed = parse_eu_stack(text, 3540, ctx)
    assert [st.tid for st in parsed] == [3540, 3541, 3542, 3543, 3544]
    main, worker = parsed[0], parsed[1]
    assert worker.name == "pool_0" and worker.source == "eu-stack"
    rows = [(f.function, f.line, is_inline(f), f.own) for f in worker.frames]
    assert rows == THREADS64_WORKER
    work = worker.frames[4]
    assert work.file == "/work/main/tests/programs/threads64.c"
    assert work.module == "/tmp/t64/threads64"
    assert worker.frames[0].file == "./nptl/futex-internal.c"
    assert worker.frames[0].module == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert (main.frames[3].function, main.frames[3].line, main.frames[3].own) == ("main", 49, True)
    start = main.frames[-1]  # no source line: file and line stay unknown
    assert (start.function, start.file, start.line, start.own) == ("_start", None, None, True)


def test_parse_eu_stack_real_output_unsymbolized_frames() -> None:
    """tests/data/eu_stack_openmp.txt: `eu-stack -a -m -s -i` on an OpenMP program
    (-fopenmp -g) whose team waits in libgomp while thread 0 reads stdin. Debian's libgomp
    has no symbols for its internals: those frames have a module but no name (gdb prints
    `??` for them too)."""
    text = (DATA / "eu_stack_openmp.txt").read_text()
    main, worker, *_ = parse_eu_stack(text, 5072, FrameContext(exe="/tmp/t64/omp_block"))
    gomp = "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"
    assert [(f.function, f.module, f.own) for f in worker.frames[:2]] == [
        ("??", gomp, False),
        ("??", gomp, False),
    ]
    assert not any(is_inline(f) for f in worker.frames)  # two calls at two addresses
    fns = [(f.function, f.line, is_inline(f)) for f in main.frames[:4]]
    assert fns == [
        ("__GI___libc_read", 26, True),  # same name, other line: the inlined syscall
        ("__GI___libc_read", 24, False),
        ("block_in_team._omp_fn.0", 7, False),
        ("GOMP_parallel", None, False),
    ]
    assert main.frames[3].module == gomp and main.frames[2].own


def test_parse_eu_stack_recursion_is_not_inlining() -> None:
    """Recursion from one call site repeats an address with the same chain: only the
    chain's inner frames are inlined (-a shown: ` - 1` marks return addresses)."""
    text = """\
TID 7:
#0  0x0000000000401000     leaf - /p
    /s/p.c:3:5
#1  0x0000000000401100 - 1 step - /p
    /s/p.c:9:5
#2  0x0000000000401100 - 1 walk - /p
    /s/p.c:20:9
#3  0x0000000000401100 - 1 step - /p
    /s/p.c:9:5
#4  0x0000000000401100 - 1 walk - /p
    /s/p.c:20:9
#5  0x0000000000401200 - 1 walk - /p
    /s/p.c:20:9
#6  0x0000000000401200 - 1 walk - /p
    /s/p.c:20:9
#7  0x0000000000401300 - 1 - /p
"""
    (st,) = parse_eu_stack(text, 7, FrameContext())
    assert [(f.function, is_inline(f)) for f in st.frames] == [
        ("leaf", False),
        ("step", True),  # step inlined into walk, walk recursing through it
        ("walk", False),
        ("step", True),
        ("walk", False),
        ("walk", False),  # plain recursion
        ("walk", False),
        ("??", False),
    ]
    assert st.frames[-1].module == "/p"


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
