"""Sample every thread of a process tree: /proc states, CPU use, native and Python stacks.

The watchdog calls `sample_tree` when it suspects a hang; `classify` reads the result.
Everything here is bounded and must leave the target as it found it:

- each external tool (gdb, eu-stack, py-spy) runs in its own session with a timeout and
  is killed as a whole process group when it overruns;
- a process that a killed tracer left in group-stop is sent SIGCONT (only if it was not
  stopped before we looked: a process stopped by someone else is evidence, not our mess);
- processes and threads that vanish while we look are skipped, never raised about;
- a missing tool, a ptrace refusal or a timeout becomes an entry in `tools`/`notes`.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from harness.process import tools

# Stack collection is per process and each attach costs ~0.2-2 s; a trainer with a big
# worker pool would otherwise take minutes. The first processes in tree order (root
# first) are the interesting ones.
MAX_STACK_PROCESSES = 16
# Several processes can be traced at once (ptrace is per process), but gdb is CPU-heavy
# while it reads symbols; a few in parallel keeps the stack phase short without starving
# the machine.
STACK_WORKERS = 4
# Raw tool output is kept for the report; a pathological process (thousands of threads)
# must not blow up memory or report size.
RAW_OUTPUT_LIMIT = 256 * 1024

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PYTHON_BASENAME = re.compile(r"^python\d*(\.\d+)?[a-z]?$")
# Python's own library tree (stdlib, and site-packages under it) and distro package dirs.
_PYTHON_LIB = re.compile(r"/lib(64)?/python\d+(\.\d+)?[a-z]?/|/(site|dist)-packages/")
_DENIED_MARKERS = ("operation not permitted", "permission denied", "eperm")


# ----------------------------------------------------------------------------- data


@dataclass
class Frame:
    function: str  # "env_start", "pthread_mutex_lock", "gomp_team_barrier_wait_end", "??"
    module: str | None = None  # mapped file path, e.g. "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
    file: str | None = None  # source file as the tool printed it (may be relative)
    line: int | None = None
    # the traced program's own code (main executable, a file or module under own_roots,
    # a Python file outside the stdlib/site-packages), not a runtime library
    own: bool = False


@dataclass
class ThreadStack:
    pid: int
    tid: int
    name: str
    frames: list[Frame]  # innermost first
    source: str  # "gdb" | "eu-stack" | "py-spy"
    python: bool = False  # True for py-spy stacks


@dataclass
class ThreadSample:
    tid: int
    name: str  # comm
    state: str  # R S D T t Z X I, from /proc/PID/task/TID/stat
    wchan: str  # kernel wait channel ("futex_do_wait", "do_wait"); "" when running/hidden
    syscall: str  # syscall number as text, "running", or "" if unreadable
    cpu_time: float  # utime+stime seconds


@dataclass
class ProcessSample:
    pid: int
    ppid: int
    name: str
    exe: str  # read through a live thread when the main thread is a zombie
    cmdline: list[str]
    status: str  # psutil status: "zombie" when only the MAIN THREAD has exited, too
    is_python: bool  # exe or argv[0] basename is python*
    threads: list[ThreadSample]


@dataclass
class Snapshot:
    t: float  # seconds since sampling began
    processes: list[ProcessSample]


@dataclass
class ThreadActivity:
    """One thread across all snapshots it was seen in."""

    pid: int
    tid: int
    name: str
    states: list[str]
    cpu_fraction: float  # CPU seconds between first and last sighting / wall seconds
    wchan: str  # from the last snapshot
    syscall: str  # from the last snapshot


@dataclass
class SampleSet:
    snapshots: list[Snapshot]
    activity: list[ThreadActivity]
    stacks: list[ThreadStack]
    # tool → "used" | "missing" | "failed: <why>" | "ptrace denied" | "timeout"
    # (the worst outcome over all processes; the per-process story is in notes)
    tools: dict[str, str]
    notes: list[str]  # degradations, one line each
    duration_s: float
    # tool output per "tool:pid", for the report's stacks file (truncated)
    raw: dict[str, str] = field(default_factory=dict)
    # seconds spent per phase: "snapshots", "stacks"
    timings: dict[str, float] = field(default_factory=dict)


def to_json(s: SampleSet) -> dict[str, Any]:
    """A plain JSON-able dict of the whole sample set."""
    return dataclasses.asdict(s)


# ----------------------------------------------------------------------------- /proc


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:  # vanished, or unreadable without ptrace rights
        return None


def read_thread(pid: int, tid: int) -> ThreadSample | None:
    """State, wchan, syscall and CPU time of one thread, or None if it is gone."""
    base = f"/proc/{pid}/task/{tid}"
    stat = _read(f"{base}/stat")
    if not stat or ")" not in stat:
        return None
    # comm may contain spaces and parentheses: the fields start after the LAST ')'
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    wchan = (_read(f"{base}/wchan") or "").strip()
    syscall = (_read(f"{base}/syscall") or "").split()
    return ThreadSample(
        tid=tid,
        name=comm,
        state=fields[0],
        wchan="" if wchan == "0" else wchan,
        syscall=syscall[0] if syscall else "",
        cpu_time=(int(fields[11]) + int(fields[12])) / _CLK_TCK,
    )


def _task_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def _read_threads(pid: int) -> list[ThreadSample]:
    threads = (read_thread(pid, tid) for tid in _task_ids(pid))
    return [t for t in threads if t is not None]


def _live_tid(pid: int, threads: Sequence[ThreadSample]) -> int | None:
    """A thread to read per-process facts through and to attach to.

    When the main thread has exited (pthread_exit) the leader is a zombie: /proc/PID/exe,
    cmdline and maps read empty and ptrace on PID fails, but a live thread's task dir
    still has them and attaching to its tid reaches the whole thread group.
    """
    for t in threads:
        if t.tid == pid and t.state not in "ZX":
            return pid
    for t in threads:
        if t.state not in "ZX":
            return t.tid
    return None


def _task_exe_cmdline(pid: int, tid: int) -> tuple[str, list[str]]:
    base = f"/proc/{pid}/task/{tid}"
    try:
        exe = os.readlink(f"{base}/exe")
    except OSError:
        exe = ""
    raw = _read(f"{base}/cmdline") or ""
    return exe, [a for a in raw.split("\0") if a]


def _exe_cmdline(proc: psutil.Process, threads: Sequence[ThreadSample]) -> tuple[str, list[str]]:
    try:
        return proc.exe(), proc.cmdline()
    except (psutil.ZombieProcess, psutil.AccessDenied):
        tid = _live_tid(proc.pid, threads)
        return _task_exe_cmdline(proc.pid, tid) if tid is not None else ("", [])


def _is_python(exe: str, cmdline: Sequence[str]) -> bool:
    names = [os.path.basename(exe), *(os.path.basename(a) for a in cmdline[:1])]
    return any(_PYTHON_BASENAME.match(n) for n in names if n)


def _sample_process(proc: psutil.Process) -> ProcessSample | None:
    try:
        with proc.oneshot():
            threads = _read_threads(proc.pid)
            exe, cmdline = _exe_cmdline(proc, threads)
            return ProcessSample(
                pid=proc.pid,
                ppid=proc.ppid(),
                name=proc.name(),
                exe=exe,
                cmdline=cmdline,
                status=proc.status(),
                is_python=_is_python(exe, cmdline),
                threads=threads,
            )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _tree(root_pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _snapshot(root_pid: int, t0: float) -> Snapshot:
    t = time.monotonic() - t0
    samples = (_sample_process(p) for p in _tree(root_pid))
    return Snapshot(t=t, processes=[s for s in samples if s is not None])


def _activity(snapshots: Sequence[Snapshot]) -> list[ThreadActivity]:
    seen: dict[tuple[int, int], list[tuple[float, ThreadSample]]] = {}
    for snap in snapshots:
        for proc in snap.processes:
            for th in proc.threads:
                seen.setdefault((proc.pid, th.tid), []).append((snap.t, th))
    return [_thread_activity(pid, tid, obs) for (pid, tid), obs in seen.items()]


def _thread_activity(
    pid: int, tid: int, obs: Sequence[tuple[float, ThreadSample]]
) -> ThreadActivity:
    (t_first, first), (t_last, last) = obs[0], obs[-1]
    elapsed = t_last - t_first
    used = last.cpu_time - first.cpu_time
    return ThreadActivity(
        pid=pid,
        tid=tid,
        name=last.name,
        states=[th.state for _, th in obs],
        cpu_fraction=max(0.0, used / elapsed) if elapsed > 0 else 0.0,
        wchan=last.wchan,
        syscall=last.syscall,
    )


# ----------------------------------------------------------------------------- own frames


@dataclass
class FrameContext:
    """What a parser needs to fill in modules, thread names and `own` flags."""

    exe: str = ""
    python_exe: bool = False  # main executable is the interpreter: a runtime, not own
    own_roots: tuple[str, ...] = ()
    names: dict[int, str] = field(default_factory=dict)  # tid -> comm
    maps: MemoryMap | None = None

    def under_own_root(self, path: str | None) -> bool:
        if not path or not os.path.isabs(path):
            return False
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.own_roots)

    def native_own(self, module: str | None, file: str | None) -> bool:
        if self.under_own_root(file) or self.under_own_root(module):
            return True
        if module is None or self.python_exe or not self.exe:
            return False
        return _same_file(module, self.exe)

    def python_own(self, file: str | None) -> bool:
        if self.under_own_root(file):
            return True
        if not file or file.startswith("<"):  # "<frozen importlib._bootstrap>", "<string>"
            return False
        return _PYTHON_LIB.search(file) is None


def _same_file(a: str, b: str) -> bool:
    if os.path.isabs(a) and os.path.isabs(b):
        return os.path.realpath(a) == os.path.realpath(b)
    return os.path.basename(a) == os.path.basename(b)


class MemoryMap:
    """Address → mapped file, from /proc/PID/maps, to name a frame's module.

    gdb prints `from LIB` only for libraries without debug info; with debug info it
    prints `at FILE:LINE` and the module is lost. The frame address (printed for every
    frame with `set print frame-info location-and-address`) recovers it.
    """

    def __init__(self, ranges: Iterable[tuple[int, int, str]]) -> None:
        self._ranges = sorted(ranges)
        self._starts = [r[0] for r in self._ranges]

    @classmethod
    def read(cls, pid: int, tid: int) -> MemoryMap:
        text = _read(f"/proc/{pid}/task/{tid}/maps") or ""
        return cls(r for r in map(_parse_maps_line, text.splitlines()) if r is not None)

    def maps_file(self, fragment: str) -> bool:
        """Whether any mapped file's basename contains `fragment` (e.g. "libpython")."""
        return any(fragment in os.path.basename(r[2]) for r in self._ranges)

    def lookup(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._ranges[i][1]:
            return self._ranges[i][2]
        return None


def _parse_maps_line(line: str) -> tuple[int, int, str] | None:
    parts = line.split(maxsplit=5)
    if len(parts) < 6 or not parts[5].startswith("/"):
        return None  # anonymous, [heap], [stack], [vdso]
    lo, hi = parts[0].split("-")
    return int(lo, 16), int(hi, 16), parts[5].removesuffix(" (deleted)")


# ----------------------------------------------------------------------------- parsers

_GDB_THREAD = re.compile(r"^Thread\s+\d+\s+\((.*)\):\s*$")
_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+)\s+in\s+)?(.*)$")
_GDB_AT = re.compile(r"\s+at\s+(\S+):(\d+)$")
_GDB_FROM = re.compile(r"\s+from\s+(\S+)$")
_EU_THREAD = re.compile(r"^TID\s+(\d+):\s*$")
_EU_FRAME = re.compile(r"^#\d+\s+0x([0-9a-fA-F]+)\s*(.*)$")
_EU_SOURCE = re.compile(r"^\s+(\S+?):(\d+)(?::\d+)?\s*$")


def parse_gdb(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `thread apply all bt` output into one ThreadStack per `Thread N (...)`."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        header = _GDB_THREAD.match(line)
        if header:
            tid, name = _gdb_thread_ids(header.group(1), pid)
            stacks.append(ThreadStack(pid, tid, name or ctx.names.get(tid, ""), [], "gdb"))
            continue
        frame = _GDB_FRAME.match(line)
        if frame and stacks:
            stacks[-1].frames.append(_gdb_frame(frame.group(2), frame.group(3), ctx))
    return stacks


def _gdb_thread_ids(inside: str, pid: int) -> tuple[int, str]:
    # `Thread 0x7f.. (LWP 4610) "xfer_b_to_a"`, `LWP 4610`, or `process 4610` (no libpthread)
    lwp = re.search(r"(?:LWP|process)\s+(\d+)", inside)
    name = re.search(r'"([^"]*)"\s*$', inside)
    return (int(lwp.group(1)) if lwp else pid), (name.group(1) if name else "")


def _gdb_frame(addr: str | None, rest: str, ctx: FrameContext) -> Frame:
    file: str | None = None
    line: int | None = None
    module: str | None = None
    if at := _GDB_AT.search(rest):
        file, line, rest = at.group(1), int(at.group(2)), rest[: at.start()]
    elif src := _GDB_FROM.search(rest):
        module, rest = src.group(1), rest[: src.start()]
    if module is None and addr and ctx.maps is not None:
        module = ctx.maps.lookup(int(addr, 16))
    function = _strip_args(rest.strip()) or "??"
    return Frame(function, module, file, line, ctx.native_own(module, file))


def _strip_args(s: str) -> str:
    """`transfer_a_to_b (arg=0x0)` → `transfer_a_to_b`; keeps `<signal handler called>`."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(s[i], 0)
        if depth == 0:
            return s[:i].rstrip()
    return s


def parse_eu_stack(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `eu-stack -m -s -i` output: `#N 0xADDR FUNC - MODULE` then `    FILE:LINE:COL`."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        if m := _EU_THREAD.match(line):
            tid = int(m.group(1))
            stacks.append(ThreadStack(pid, tid, ctx.names.get(tid, ""), [], "eu-stack"))
        elif (m := _EU_FRAME.match(line)) and stacks:
            stacks[-1].frames.append(_eu_frame(int(m.group(1), 16), m.group(2), ctx))
        elif (m := _EU_SOURCE.match(line)) and stacks and stacks[-1].frames:
            frame = stacks[-1].frames[-1]
            frame.file, frame.line = m.group(1), int(m.group(2))
            frame.own = ctx.native_own(frame.module, frame.file)
    return [s for s in stacks if s.frames]  # a thread eu-stack could not unwind says nothing


def _eu_frame(addr: int, rest: str, ctx: FrameContext) -> Frame:
    function, sep, module = rest.rpartition(" - ")
    if not sep:
        function, module = rest, ""
    mod = module.strip() or (ctx.maps.lookup(addr) if ctx.maps else None)
    return Frame(function.strip() or "??", mod, None, None, ctx.native_own(mod, None))


def parse_py_spy(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `py-spy dump --json` (a list of threads, innermost frame first)."""
    data = json.loads(text)
    stacks = []
    for th in data if isinstance(data, list) else []:
        tid = int(th.get("os_thread_id") or 0)
        name = th.get("thread_name") or ctx.names.get(tid, "")
        frames = [_py_frame(f, ctx) for f in th.get("frames", [])]
        stacks.append(
            ThreadStack(int(th.get("pid", pid)), tid, name, frames, "py-spy", python=True)
        )
    return stacks


def _py_frame(f: dict[str, Any], ctx: FrameContext) -> Frame:
    filename = f.get("filename") or None
    line = f.get("line") or None
    if f.get("module"):  # a native frame merged in by --native: `module` is the .so
        module = str(f["module"])
        return Frame(str(f.get("name", "??")), module, None, line, ctx.native_own(module, None))
    return Frame(str(f.get("name", "??")), None, filename, line, ctx.python_own(filename))


# ----------------------------------------------------------------------------- running tools


ToolRun = tools.ToolResult


def run_tool(argv: Sequence[str], timeout: float) -> ToolRun:
    """Run a tool in its own session; on timeout its whole process group is killed."""
    return tools.run_tool(argv, timeout)


def _denied(output: str) -> bool:
    low = output.lower()
    return any(m in low for m in _DENIED_MARKERS)


def _first_line(output: str) -> str:
    for line in output.splitlines():
        if line.strip() and not line.startswith(("[", "Using host libthread_db")):
            return line.strip()[:200]
    return "no output"


# ----------------------------------------------------------------------------- stacks


@dataclass
class _Plan:
    native: str | None  # "gdb" | "eu-stack" | None
    native_fallback: str | None  # eu-stack when gdb fails outright (not on denial/timeout)
    python: str | None  # "py-spy" | None
    paths: dict[str, str]
    py_native: bool = False
    deadline: float = 0.0  # time.monotonic() after which no tool is started
    timeout: float = 10.0


@dataclass
class _Outcome:
    stacks: list[ThreadStack] = field(default_factory=list)
    tools: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)
    killed: bool = False  # a tool was killed on timeout


def find_tool(name: str) -> str | None:
    """shutil.which on the current PATH; py-spy also next to this interpreter.

    py-spy is a pip dependency, so it sits in the venv's bin, which is not on PATH when
    the harness is run as `.venv/bin/harness`.
    """
    found = shutil.which(name)
    if found is None and name == "py-spy":
        candidate = Path(sys.executable).parent / name
        found = str(candidate) if os.access(candidate, os.X_OK) else None
    return found


# native= choice → tools to try, in order of preference
_NATIVE_TOOLS = {
    "auto": ("gdb", "eu-stack"),
    "gdb": ("gdb",),
    "eu-stack": ("eu-stack",),
    "none": (),
}
_PYTHON_CHOICES = ("auto", "py-spy", "none")


def _plan(native: str, python: str, result: SampleSet) -> _Plan:
    """Which tools to use, recording the missing ones in result.tools/notes."""
    if native not in _NATIVE_TOOLS or python not in _PYTHON_CHOICES:
        raise ValueError(f"native={native!r} python={python!r}")
    paths = {n: p for n in ("gdb", "eu-stack", "py-spy") if (p := find_tool(n))}
    want = _NATIVE_TOOLS[native]
    available = [n for n in want if n in paths]
    for n in want:
        # a missing fallback is worth a line only when nothing else is there
        if n not in paths and (n == want[0] or not available):
            result.tools[n] = "missing"
    if want and want[0] not in paths:
        result.notes.append(_missing_native_note(want, available))
    return _Plan(
        native=available[0] if available else None,
        native_fallback=available[1] if len(available) > 1 else None,
        python="py-spy" if python != "none" and "py-spy" in paths else None,
        paths=paths,
    )


def _missing_native_note(want: Sequence[str], available: Sequence[str]) -> str:
    if available:
        return f"{want[0]} not found on PATH: native stacks from {available[0]}"
    return f"{', '.join(want)} not found on PATH: no native stacks, thread states from /proc only"


def _context(proc: ProcessSample, tid: int, own_roots: tuple[str, ...]) -> FrameContext:
    return FrameContext(
        exe=proc.exe,
        python_exe=_is_python(proc.exe, proc.cmdline[:1]),
        own_roots=own_roots,
        names={t.tid: t.name for t in proc.threads},
        maps=MemoryMap.read(proc.pid, tid),
    )


def _argv(tool: str, path: str, attach: int, py_native: bool) -> list[str]:
    if tool == "gdb":
        # -iex runs before the attach: debuginfod would otherwise try the network
        sets = ["debuginfod enabled off", "pagination off", "width 0", "print frame-arguments none"]
        pre = [a for s in sets[:1] for a in ("-iex", f"set {s}")]
        post = [a for s in sets[1:] for a in ("-ex", f"set {s}")]
        info = ["-ex", "set print frame-info location-and-address", "-ex", "thread apply all bt"]
        return [path, "-p", str(attach), "-batch", "-nx", *pre, *post, *info]
    if tool == "eu-stack":
        return [path, "-p", str(attach), "-m", "-s", "-i"]
    return [path, "dump", "--pid", str(attach), "--json", *(["--native"] if py_native else [])]


_PARSERS = {"gdb": parse_gdb, "eu-stack": parse_eu_stack, "py-spy": parse_py_spy}


def _take(
    tool: str, proc: ProcessSample, attach: int, ctx: FrameContext, plan: _Plan, out: _Outcome
) -> str:
    """Run one tool on one process; record its stacks and return its status word."""
    budget = min(plan.timeout, plan.deadline - time.monotonic())
    if budget < 0.5:
        out.notes.append(f"{tool}: stack time budget spent, pid {proc.pid} skipped")
        return "timeout"
    run = run_tool(_argv(tool, plan.paths[tool], attach, plan.py_native), budget)
    out.raw[f"{tool}:{proc.pid}"] = run.output[:RAW_OUTPUT_LIMIT]
    if run.timed_out:
        out.killed = True
        out.notes.append(
            f"{tool} timed out after {budget:.1f}s on pid {proc.pid}: process group killed"
        )
        return "timeout"
    if run.returncode is None:
        return _failed(tool, proc.pid, run.error, out)
    stacks, why = _parse(tool, run, proc.pid, ctx)
    if stacks:
        out.stacks.extend(sorted(stacks, key=lambda s: s.tid))
        if _denied(run.stderr):  # eu-stack unwinds what it may and says which it may not
            out.notes.append(f"{tool} partial on pid {proc.pid}: {_first_line(run.stderr)}")
        return "used"
    if _denied(run.output):
        return _denial(tool, proc.pid, run.output, out)
    return _failed(tool, proc.pid, why or _first_line(run.output), out)


def _parse(tool: str, run: ToolRun, pid: int, ctx: FrameContext) -> tuple[list[ThreadStack], str]:
    try:
        # py-spy: JSON on stdout, diagnostics on stderr; gdb mixes both usefully
        return _PARSERS[tool](run.stdout if tool == "py-spy" else run.output, pid, ctx), ""
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return [], f"unparseable output ({type(e).__name__}: {e})"[:200]


def _denial(tool: str, pid: int, output: str, out: _Outcome) -> str:
    if not psutil.pid_exists(pid):
        return "vanished"
    traced = next((s.strip() for s in output.splitlines() if "already traced" in s), "")
    why = traced or "kernel.yama.ptrace_scope, missing CAP_SYS_PTRACE, or another tracer"
    out.notes.append(f"{tool}: ptrace denied for pid {pid} ({why})")
    return "ptrace denied"


def _failed(tool: str, pid: int, why: str, out: _Outcome) -> str:
    if not psutil.pid_exists(pid):
        return "vanished"  # exited between the snapshot and the attach: not a tool failure
    out.notes.append(f"{tool} failed on pid {pid}: {why}")
    return f"failed: {why}"


def _collect_process(proc: ProcessSample, plan: _Plan, own_roots: tuple[str, ...]) -> _Outcome:
    out = _Outcome()
    attach = _live_tid(proc.pid, proc.threads)
    if attach is None:
        out.notes.append(f"pid {proc.pid} is a zombie: no stacks")
        return out
    ctx = _context(proc, attach, own_roots)
    stopped_before = _stopped_tids(proc.pid)
    try:
        _run_tools(proc, attach, ctx, plan, out)
    finally:
        if out.killed:  # a SIGSTOP the killed tracer sent may land just after its death
            time.sleep(0.2)
        _resume_if_we_stopped(proc.pid, stopped_before, out)
    return out


def _run_tools(
    proc: ProcessSample, attach: int, ctx: FrameContext, plan: _Plan, out: _Outcome
) -> None:
    # py-spy first: it is quick and suspends the process only briefly, and two tracers
    # cannot attach at once, so the tools run one after the other.
    embedded = ctx.maps is not None and ctx.maps.maps_file("libpython")
    if plan.python and (proc.is_python or embedded):
        out.tools.append((plan.python, _take(plan.python, proc, attach, ctx, plan, out)))
    if plan.native is None:
        return
    status = _take(plan.native, proc, attach, ctx, plan, out)
    out.tools.append((plan.native, status))
    if status.startswith("failed") and plan.native_fallback:
        out.notes.append(f"pid {proc.pid}: {plan.native} failed, trying {plan.native_fallback}")
        out.tools.append(
            (plan.native_fallback, _take(plan.native_fallback, proc, attach, ctx, plan, out))
        )


def _stopped_tids(pid: int) -> set[int]:
    return {t.tid for t in _read_threads(pid) if t.state == "T"}


def _resume_if_we_stopped(pid: int, before: set[int], out: _Outcome) -> None:
    """A tracer killed mid-attach can leave threads in group-stop; undo only that."""
    if not before and _stopped_tids(pid):
        try:
            os.kill(pid, signal.SIGCONT)
            out.notes.append(f"pid {pid} was left stopped by a tracer: sent SIGCONT")
        except ProcessLookupError:
            pass


_SEVERITY = ("used", "failed", "timeout", "ptrace denied")


def _merge_tool(tools: dict[str, str], name: str, status: str) -> None:
    """Keep the most telling status per tool: denial > timeout > failure > used."""
    if status == "vanished":
        return

    def rank(s: str) -> int:
        return next(i for i, w in enumerate(_SEVERITY) if s.startswith(w))

    old = tools.get(name)
    if old is None or old == "missing" or rank(status) > rank(old):
        tools[name] = status


def _collect_stacks(
    procs: Sequence[ProcessSample], plan: _Plan, own_roots: tuple[str, ...], result: SampleSet
) -> None:
    if len(procs) > MAX_STACK_PROCESSES:
        result.notes.append(
            f"stacks capped at the first {MAX_STACK_PROCESSES} of {len(procs)} processes"
        )
        procs = procs[:MAX_STACK_PROCESSES]
    if not procs or (plan.native is None and plan.python is None):
        return
    pool = ThreadPoolExecutor(max_workers=min(STACK_WORKERS, len(procs)))
    try:
        outcomes = list(pool.map(lambda p: _collect_process(p, plan, own_roots), procs))
    finally:
        # an interrupted harness must not wait for every running gdb/py-spy to finish: the
        # caller kills the traced tree next, which ends those tools too
        pool.shutdown(wait=False, cancel_futures=True)
    for o in outcomes:  # tree order, whatever order the workers finished in
        result.stacks.extend(o.stacks)
        result.notes.extend(o.notes)
        result.raw.update(o.raw)
        for name, status in o.tools:
            _merge_tool(result.tools, name, status)


# ----------------------------------------------------------------------------- entry point


def sample_tree(
    root_pid: int,
    *,
    snapshots: int = 3,
    interval: float = 0.5,
    stack_timeout: float = 10.0,
    native: str = "auto",
    python: str = "auto",
    own_roots: Sequence[str] = (),
    py_native: bool = False,
) -> SampleSet:
    """Snapshot every thread of root_pid's tree `snapshots` times, then take stacks once.

    Never raises for anything the target or the tools do; see `tools` and `notes`.
    The stack phase is bounded by about 3 × stack_timeout in all.
    """
    t0 = time.monotonic()
    result = SampleSet([], [], [], {}, [], 0.0)
    plan = _plan(native, python, result)
    result.snapshots = _take_snapshots(root_pid, max(1, snapshots), interval, t0)
    result.activity = _activity(result.snapshots)
    last = _last_seen(result.snapshots)
    if not last:
        result.notes.append(f"pid {root_pid}: no process left to sample")
    elif plan.python is None and python != "none" and any(p.is_python for p in last):
        result.tools["py-spy"] = "missing"
        result.notes.append("py-spy not found: no Python stacks")
    t_stacks = time.monotonic()
    result.timings["snapshots"] = t_stacks - t0
    plan.py_native, plan.timeout = py_native, stack_timeout
    plan.deadline = t_stacks + 3 * stack_timeout
    roots = tuple(os.path.realpath(r) for r in own_roots)
    _collect_stacks(last, plan, roots, result)
    result.duration_s = time.monotonic() - t0
    result.timings["stacks"] = result.duration_s - result.timings["snapshots"]
    return result


def _take_snapshots(root_pid: int, n: int, interval: float, t0: float) -> list[Snapshot]:
    snaps = []
    for i in range(n):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        snaps.append(_snapshot(root_pid, t0))
    return snaps


def _last_seen(snapshots: Sequence[Snapshot]) -> list[ProcessSample]:
    """The processes of the last snapshot that are still there, refreshed for attaching."""
    procs = snapshots[-1].processes if snapshots else []
    fresh = (_resample(p.pid) for p in procs)
    return [p for p in fresh if p is not None]


def _resample(pid: int) -> ProcessSample | None:
    try:
        return _sample_process(psutil.Process(pid))
    except psutil.Error:
        return None
