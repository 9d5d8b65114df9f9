"""Native and Python stacks of the sampled processes: which tools to use (gdb, eu-stack,
py-spy), how each is invoked, running them under a time budget, turning their refusals
and failures into `tools`/`notes` entries, and resuming a process a killed tracer left
stopped."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from harness.process.tools import ToolResult, find_tool, permission_denied, run_tool
from harness.sampling.frames import FrameContext, MemoryMap
from harness.sampling.model import ProcessSample, SampleSet, ThreadStack
from harness.sampling.parsers import parse_eu_stack, parse_gdb, parse_py_spy
from harness.sampling.procfs import is_python, live_tid, read_threads

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


@dataclass
class Plan:
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


# native= choice → tools to try, in order of preference
_NATIVE_TOOLS = {
    "auto": ("gdb", "eu-stack"),
    "gdb": ("gdb",),
    "eu-stack": ("eu-stack",),
    "none": (),
}
_PYTHON_CHOICES = ("auto", "py-spy", "none")


def plan_tools(native: str, python: str, result: SampleSet) -> Plan:
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
    return Plan(
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
        python_exe=is_python(proc.exe, proc.cmdline[:1]),
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
    tool: str, proc: ProcessSample, attach: int, ctx: FrameContext, plan: Plan, out: _Outcome
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
        # eu-stack unwinds what it may and says which it may not
        if permission_denied(run.stderr):
            out.notes.append(f"{tool} partial on pid {proc.pid}: {_first_line(run.stderr)}")
        return "used"
    if permission_denied(run.output):
        return _denial(tool, proc.pid, run.output, out)
    return _failed(tool, proc.pid, why or _first_line(run.output), out)


def _parse(
    tool: str, run: ToolResult, pid: int, ctx: FrameContext
) -> tuple[list[ThreadStack], str]:
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


def _collect_process(proc: ProcessSample, plan: Plan, own_roots: tuple[str, ...]) -> _Outcome:
    out = _Outcome()
    attach = live_tid(proc.pid, proc.threads)
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
    proc: ProcessSample, attach: int, ctx: FrameContext, plan: Plan, out: _Outcome
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
    return {t.tid for t in read_threads(pid) if t.state == "T"}


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


def collect_stacks(
    procs: Sequence[ProcessSample], plan: Plan, own_roots: tuple[str, ...], result: SampleSet
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


def _first_line(output: str) -> str:
    for line in output.splitlines():
        if line.strip() and not line.startswith(("[", "Using host libthread_db")):
            return line.strip()[:200]
    return "no output"
