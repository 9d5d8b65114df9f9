"""Native and Python stacks of the sampled processes: which tools to use (the registry of
sampling/tools.py: eu-stack, gdb, py-spy, with how each is invoked and parsed), running them
under a time budget, turning their refusals and failures into `tools`/`notes` entries, and
resuming a process a killed tracer left stopped.

The fastest tools by default. Native stacks come from eu-stack in two steps:
`eu-stack -q -a -m` unwinds every thread while attached (addresses and modules, no
names: 0.01-0.06 s), then `eu-addr2line --pretty-print -a -f -i -C` names each distinct
address once (function, FILE:LINE, inlined calls as frames of their own) from the files
and /proc/PID/maps, without attaching: the process already runs again. Naming is the
costly part: eu-stack scans a library's whole symbol table per frame (25-80 ms each in
libtorch_cpu.so, so 16 identical worker threads cost 0.4-1.2 s in one `eu-stack -a -m
-s -i`, which is what runs when eu-addr2line is missing), while distinct addresses are
few. The modules may be split among several eu-addr2line runs on CPUs the process
workers leave idle (`_split_modules`). gdb is the fallback when eu-stack is missing or
fails outright, and is used on request; it takes 0.3-10 s, mostly reading symbols. gdb
is not run to fill in frames eu-stack left as `??`: both read the same symbols (.symtab,
.dynsym, DWARF, /usr/lib/debug; debuginfod is off), so what one cannot name the other
cannot either (libgomp's internals read `??` in both). Python stacks come from `py-spy
dump` without `--native` (eu-stack gives the native side; `--native` costs py-spy
0.1-0.5 s of unwinding), unless `py_native` asks for it.

Each attach stops the process, so each process is attached at most once per tool: one
Python dump (py-spy, Python processes only) and one native dump (eu-stack, or gdb on
request or when eu-stack failed outright), one after the other, never two tools on one
pid at once. py-spy goes first: it is the quickest (0.02-0.06 s) and its frames are the
telling ones in a Python process, so they are in hand before the native dump can spend
the time budget. Back to back is safe because `run_tool` returns only once a tool has
exited, and a tracer's exit ends its ptrace attachment (it detaches, or the kernel
detaches a dead tracer), so the next one finds the process free; eu-addr2line attaches
to nothing. Processes are independent (ptrace is per process): up to `stack_workers()`
of them are dumped at once, each by one worker running its tools in that order. Every
tool run is recorded in `SampleSet.timings` as `"TOOL:PID"` → its seconds, so a reader
can count the attaches (every tool but eu-addr2line attaches).
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from harness.files import read_text
from harness.process.cgroup import CGROUP_ROOT
from harness.process.cgroup import cpu_quota as cgroup_cpu_quota
from harness.process.tools import find_tool, permission_denied, run_tool
from harness.sampling.frames import FrameContext, MemoryMap
from harness.sampling.model import ProcessSample, SampleSet, ThreadStack
from harness.sampling.parsers import Location, eu_stack_addresses, parse_addr2line
from harness.sampling.procfs import is_python, live_tid
from harness.sampling.tools import EU_ADDR2LINE, Dump, Invocation, StackTool, wanted
from harness.vocab import StackToolKind

# Stack collection is per process and each attach costs 0.03-2 s; a trainer with a big
# worker pool would otherwise take minutes. The first processes in tree order (root
# first) are the interesting ones.
MAX_STACK_PROCESSES = 16
# Raw tool output is kept for the report; a pathological process (thousands of threads)
# must not blow up memory or report size.
RAW_OUTPUT_LIMIT = 256 * 1024


@dataclass
class Plan:
    # the native tools on PATH, in registry order: the first, then each next one when the
    # one before failed outright (not on a denial or a timeout: the next would fare alike)
    native: list[StackTool]
    python: StackTool | None
    paths: dict[str, str]  # tool (and namer) name -> executable
    python_wanted: tuple[StackTool, ...] = ()  # what the python choice asked for
    py_native: bool = False
    deadline: float = 0.0  # time.monotonic() after which no tool is started
    timeout: float = 10.0
    name_jobs: int = 1  # eu-addr2line runs at once per process (modules split among them)

    def named(self, tool: StackTool) -> bool:
        """The tool's namer is on PATH: it names the frames after the attach."""
        return tool.namer is not None and tool.namer in self.paths


@dataclass
class _Outcome:
    stacks: list[ThreadStack] = field(default_factory=list)
    tools: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # "tool:pid" -> seconds
    killed: bool = False  # a tool was killed on timeout


def plan_tools(native: str, python: str, result: SampleSet) -> Plan:
    """Which tools to use (the choices of sampling/tools.py: auto, a tool's name, none),
    recording the missing native ones in result.tools/notes."""
    want = wanted(StackToolKind.NATIVE, native)
    want_py = wanted(StackToolKind.PYTHON, python)
    names = {t.name.value for t in (*want, *want_py)}
    names |= {t.namer for t in want if t.namer}
    paths = {n: p for n in sorted(names) if (p := find_tool(n))}
    available = [t for t in want if t.name in paths]
    for t in want:
        # a missing fallback is worth a line only when nothing else is there
        if t.name not in paths and (t is want[0] or not available):
            result.tools[t.name] = "missing"
    if want and want[0].name not in paths:
        result.notes.append(_missing_native_note(want, available))
    return Plan(
        native=available,
        python=next((t for t in want_py if t.name in paths), None),
        paths=paths,
        python_wanted=want_py,
    )


def _missing_native_note(want: Sequence[StackTool], available: Sequence[StackTool]) -> str:
    if available:
        return f"{want[0].name} not found on PATH: native stacks from {available[0].name}"
    names = ", ".join(t.name for t in want)
    return f"{names} not found on PATH: no native stacks, thread states from /proc only"


def _context(proc: ProcessSample, tid: int, own_roots: tuple[str, ...]) -> FrameContext:
    return FrameContext(
        exe=proc.exe,
        python_exe=is_python(proc.exe, proc.cmdline[:1]),
        own_roots=own_roots,
        names={t.tid: t.name for t in proc.threads},
        maps=MemoryMap.read(proc.pid, tid),
    )


def _take(
    tool: StackTool, proc: ProcessSample, attach: int, ctx: FrameContext, plan: Plan, out: _Outcome
) -> str:
    """Run one tool on one process; record its stacks and return its status word."""
    key = f"{tool.name}:{proc.pid}"
    budget = min(plan.timeout, plan.deadline - time.monotonic())
    if budget < 0.5:
        out.notes.append(f"{tool.name}: stack time budget spent, pid {proc.pid} skipped")
        return "timeout"
    named = plan.named(tool)
    how = Invocation(plan.paths[tool.name], attach, named=named, py_native=plan.py_native)
    run = run_tool(tool.argv(how), budget)
    out.raw[key] = run.output[:RAW_OUTPUT_LIMIT]
    out.timings[key] = round(run.duration_s, 4)
    if run.timed_out:
        out.killed = True
        out.notes.append(
            f"{tool.name} timed out after {budget:.1f}s on pid {proc.pid}: process group killed"
        )
        return "timeout"
    if run.returncode is None:
        return _failed(tool.name, proc.pid, run.error, out)
    names = _name_frames(run.stdout, proc.pid, attach, plan, out) if named else None
    stacks, why = _parse(tool, Dump(run.stdout, run.stderr, proc.pid, ctx, names))
    if stacks:
        out.stacks.extend(sorted(stacks, key=lambda s: s.tid))
        # eu-stack unwinds what it may and says which it may not; a zombie thread (an
        # exited main thread) has nothing to unwind and is no refusal
        refused = [e for e in _unwind_errors(run.stderr, proc) if permission_denied(e)]
        if refused:
            out.notes.append(f"{tool.name} partial on pid {proc.pid}: {refused[0][:200]}")
        return "used"
    if tool.attach.ptrace and permission_denied(run.output):
        return _denial(tool.name, proc.pid, run.output, out)
    return _failed(tool.name, proc.pid, why or _first_line(run.output), out)


def _parse(tool: StackTool, dump: Dump) -> tuple[list[ThreadStack], str]:
    try:
        return tool.parse(dump), ""
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return [], f"unparseable output ({type(e).__name__}: {e})"[:200]


def _name_frames(
    dump: str, pid: int, attach: int, plan: Plan, out: _Outcome
) -> dict[int, list[Location]] | None:
    """Name the distinct addresses of an `eu-stack -q` dump with eu-addr2line. It does not
    attach: it reads /proc/PID/maps (through a live thread) and the mapped files. The
    cost is per module (a symbol table to scan, DWARF to read), so with CPUs to spare the
    modules are split among `plan.name_jobs` runs at once."""
    by_module = eu_stack_addresses(dump)
    if not by_module:
        return None
    budget = min(plan.timeout, plan.deadline - time.monotonic())
    if budget < 0.5:
        out.notes.append(f"eu-addr2line: stack time budget spent, pid {pid}: frames unnamed")
        return None
    opts = ["-p", str(attach), "-a", "-f", "-i", "-C", "--pretty-print"]
    argvs = [
        [plan.paths[EU_ADDR2LINE], *opts, *map(hex, group)]
        for group in _split_modules(by_module, plan.name_jobs)
    ]
    start = time.monotonic()
    if len(argvs) == 1:
        runs = [run_tool(argvs[0], budget)]
    else:
        with ThreadPoolExecutor(max_workers=len(argvs)) as pool:
            runs = list(pool.map(lambda argv: run_tool(argv, budget), argvs))
    out.raw[f"{EU_ADDR2LINE}:{pid}"] = "".join(r.output for r in runs)[:RAW_OUTPUT_LIMIT]
    out.timings[f"{EU_ADDR2LINE}:{pid}"] = round(time.monotonic() - start, 4)
    names: dict[int, list[Location]] = {}
    for run in runs:
        named = parse_addr2line(run.stdout)
        if not named:
            why = run.error or _first_line(run.output)
            why = f"timed out after {budget:.1f}s" if run.timed_out else why
            out.notes.append(f"eu-addr2line failed on pid {pid} ({why}): native frames unnamed")
        names.update(named)
    return names or None


def _split_modules(
    by_module: dict[str, list[int]], jobs: int, size: Callable[[str], int] | None = None
) -> list[list[int]]:
    """The addresses in at most `jobs` groups of whole modules. A run costs a process start
    (about 0.02 s) plus, per module, a scan of its symbol table and a read of its DWARF,
    which grow with its size: the big modules (>= 1 MiB) are spread over the groups, the
    biggest first onto the lightest, the small ones join the lightest group."""
    size = size or _file_size
    sized = sorted(((size(m), m) for m in by_module), reverse=True)
    big = [m for n, m in sized if n >= 1 << 20]
    groups: list[tuple[int, list[int]]] = [(0, []) for _ in range(max(1, min(jobs, len(big))))]
    for n, module in sized:
        k = min(range(len(groups)), key=lambda i: groups[i][0])
        groups[k] = (groups[k][0] + n, groups[k][1] + by_module[module])
    return [sorted(g) for _, g in groups if g]


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0


_EU_ERROR_TID = re.compile(r"\btid (\d+)\b")


def _unwind_errors(stderr: str, proc: ProcessSample) -> list[str]:
    """eu-stack's per-thread complaints (`dwfl_thread_getframes tid N: ...`), less those
    about zombie threads."""
    zombies = {t.tid for t in proc.threads if t.state in ("Z", "X")}
    errors = []
    for line in stderr.splitlines():
        tid = _EU_ERROR_TID.search(line)
        if line.strip() and not (tid and int(tid.group(1)) in zombies):
            errors.append(line.strip())
    return errors


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


def _collect_process(proc: ProcessSample, plan: Plan, own_roots: tuple[str, ...]) -> _Outcome:
    out = _Outcome()
    attach = live_tid(proc.pid, proc.threads)
    if attach is None:
        out.notes.append(f"pid {proc.pid} is a zombie: no stacks")
        return out
    ctx = _context(proc, attach, own_roots)
    # only a tool that stops the process can leave it stopped
    stops = any(t.attach.stops for t in [*plan.native, *filter(None, [plan.python])])
    stopped_before = stopped_tids(proc.pid) if stops else set()
    try:
        _run_tools(proc, attach, ctx, plan, out)
    finally:
        if stops:
            settle_tracer(proc.pid, stopped_before, out.killed, out.notes)
    return out


def _run_tools(
    proc: ProcessSample, attach: int, ctx: FrameContext, plan: Plan, out: _Outcome
) -> None:
    # one tool at a time on this process, the Python one first (see the module docstring)
    embedded = ctx.maps is not None and ctx.maps.maps_file("libpython")
    if plan.python and (proc.is_python or embedded):
        out.tools.append((plan.python.name, _take(plan.python, proc, attach, ctx, plan, out)))
    for i, tool in enumerate(plan.native):
        if i:
            before = plan.native[i - 1].name
            out.notes.append(f"pid {proc.pid}: {before} failed, trying {tool.name}")
        status = _take(tool, proc, attach, ctx, plan, out)
        out.tools.append((tool.name, status))
        if not status.startswith("failed"):
            return


def stopped_tids(pid: int) -> set[int]:
    """Threads in group-stop (state T), from each thread's stat alone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    stopped = set()
    for tid in tids:
        stat = read_text(f"/proc/{pid}/task/{tid}/stat") or ""
        # comm may hold spaces and parentheses: the state is the first field after the last ')'
        if stat[stat.rfind(")") + 1 :].split()[:1] == ["T"]:
            stopped.add(int(tid))
    return stopped


def settle_tracer(pid: int, before: set[int], killed: bool, notes: list[str]) -> None:
    """After the tracers of a process (`before`: its stopped threads before them): a tracer
    killed mid-attach can leave threads in group-stop; undo only that."""
    if killed:  # a SIGSTOP the killed tracer sent may land after its death
        time.sleep(0.2)
    if not before and stopped_tids(pid):
        try:
            os.kill(pid, signal.SIGCONT)
            notes.append(f"pid {pid} was left stopped by a tracer: sent SIGCONT")
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


def stack_workers(cgroup: str = CGROUP_ROOT) -> int:
    """How many processes are dumped at once: the CPUs this process may run on, or the
    cgroup's CPU quota (rounded up) when that is lower; at least 1. A tool mostly waits
    on the kernel (attach, stop, memory reads) or reads symbols on one CPU, so one per
    CPU keeps the phase short without starving the machine."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def collect_stacks(
    procs: Sequence[ProcessSample], plan: Plan, own_roots: tuple[str, ...], result: SampleSet
) -> None:
    """Stacks of `procs` (tree order) into result.stacks/tools/notes/raw, and each
    attach's seconds into result.timings as "TOOL:PID"."""
    if len(procs) > MAX_STACK_PROCESSES:
        result.notes.append(
            f"stacks capped at the first {MAX_STACK_PROCESSES} of {len(procs)} processes"
        )
        procs = procs[:MAX_STACK_PROCESSES]
    if not procs or (not plan.native and plan.python is None):
        return
    workers = stack_workers()
    # CPUs the process workers leave idle go to naming frames (one process: all of them)
    plan.name_jobs = max(1, workers // min(workers, len(procs)))
    pool = ThreadPoolExecutor(max_workers=min(workers, len(procs)))
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
        result.timings.update(o.timings)
        for name, status in o.tools:
            _merge_tool(result.tools, name, status)


def _first_line(output: str) -> str:
    for line in output.splitlines():
        if line.strip() and not line.startswith(("[", "Using host libthread_db")):
            return line.strip()[:200]
    return "no output"
