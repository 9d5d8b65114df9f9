"""Can the harness see inside a hang here: ptrace (the first native stack tool of the sampler's
registry, sampling/tools.py, attaching to a sibling the way the sampler attaches to a trainer)
and the first Python stack tool (py-spy) dumping a Python child's frames.

The targets we attach to are started through `process.tools.started`: their own session,
killed and reaped however the probe ends."""

from __future__ import annotations

import re
import shutil
import sys

from harness.doctor.model import Probe, ProbeContext, why
from harness.files import read_text
from harness.process.tools import ToolResult, permission_denied, started
from harness.sampling import tools as stack_tools
from harness.sampling.frames import FrameContext
from harness.sampling.model import ThreadStack
from harness.sampling.tools import Dump, Invocation, StackTool
from harness.vocab import DoctorStatus, StackToolKind

PTRACE_HINT = (
    "ptrace denied: run the container with --cap-add=SYS_PTRACE, or set "
    "kernel.yama.ptrace_scope=0; the harness then falls back to /proc samples without stacks"
)
_CAP_SYS_PTRACE = 19

# ----------------------------------------------------------------------------- ptrace


def _ptrace_context() -> str:
    scope = read_text("/proc/sys/kernel/yama/ptrace_scope")
    cap = _has_cap(_CAP_SYS_PTRACE)
    cap_text = "unknown" if cap is None else ("yes" if cap else "no")
    return f"ptrace_scope={scope.strip() if scope else 'n/a'}, CAP_SYS_PTRACE={cap_text}"


def _has_cap(bit: int) -> bool | None:
    status = read_text("/proc/self/status") or ""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.M)
    return bool(int(m.group(1), 16) >> bit & 1) if m else None


def _sleeper() -> list[str]:
    sleep = shutil.which("sleep")
    return [sleep, "30"] if sleep else [sys.executable, "-c", "import time; time.sleep(30)"]


def _first_tool(ctx: ProbeContext, kind: StackToolKind) -> tuple[StackTool, str] | None:
    """The tool the sampler would use here (`auto`: the first of its kind on PATH)."""
    for tool in stack_tools.of_kind(kind):
        exe = ctx.which(tool.name)
        if exe is not None:
            return tool, exe
    return None


def _dumped(tool: StackTool, res: ToolResult, pid: int) -> list[ThreadStack]:
    """The stacks of `pid` in the tool's output, read by the sampler's own parser."""
    try:
        stacks = tool.parse(Dump(res.stdout, res.stderr, pid, FrameContext()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    return [st for st in stacks if st.pid == pid]


def probe_ptrace(ctx: ProbeContext) -> Probe:
    """The first native stack tool on PATH attaches to a sibling process with the sampler's
    own command line (at ptrace_scope=1 a parent may trace its child, but not a sibling)."""
    context = _ptrace_context()
    found = _first_tool(ctx, StackToolKind.NATIVE)
    if found is None:
        names = " or ".join(t.name for t in stack_tools.of_kind(StackToolKind.NATIVE))
        return Probe("", DoctorStatus.SKIP, f"no {names} to attach with; {context}")
    tool, exe = found
    with started(_sleeper(), limit_s=ctx.timeout_s + 10) as target:
        res = ctx.run(tool.argv(Invocation(exe, target.pid)))
    if _dumped(tool, res, target.pid):
        return Probe("", DoctorStatus.OK, f"{tool.name} attached to a sibling process; {context}")
    if res.timed_out:
        detail = f"{tool.name} did not attach within {ctx.timeout_s:g}s; {context}"
        return Probe("", DoctorStatus.FAIL, detail)
    if permission_denied(res.output):
        return Probe("", DoctorStatus.FAIL, f"{tool.name}: {why(res)}; {context}", PTRACE_HINT)
    detail = f"{tool.name} could not attach: {why(res)}; {context}"
    return Probe("", DoctorStatus.FAIL, detail, PTRACE_HINT)


# ----------------------------------------------------------------------------- py-spy

_PY_TARGET = (
    "import sys, time\n"
    "def doctor_wait():\n"
    "    print('ready', flush=True)\n"
    "    while True:\n"
    "        time.sleep(0.05)\n"
    "doctor_wait()\n"
)


def probe_py_spy(ctx: ProbeContext) -> Probe:
    """The first Python stack tool on PATH dumps a Python child, as the sampler would."""
    found = _first_tool(ctx, StackToolKind.PYTHON)
    if found is None:
        names = " or ".join(t.name for t in stack_tools.of_kind(StackToolKind.PYTHON))
        return Probe("", DoctorStatus.SKIP, f"{names} not found (PATH or next to the interpreter)")
    tool, exe = found
    limit = ctx.timeout_s + 10
    with started([sys.executable, "-c", _PY_TARGET], ready="ready", limit_s=limit) as target:
        res = ctx.run(tool.argv(Invocation(exe, target.pid)))
    frames = [f.function for st in _dumped(tool, res, target.pid) for f in st.frames]
    if "doctor_wait" in frames:
        return Probe("", DoctorStatus.OK, f"{tool.name} dumped the frames of a Python child")
    if res.timed_out:
        detail = f"{tool.name} did not finish within {ctx.timeout_s:g}s"
        return Probe("", DoctorStatus.FAIL, detail)
    if permission_denied(res.output):
        return Probe("", DoctorStatus.FAIL, f"{tool.name}: {why(res)}", PTRACE_HINT)
    return Probe("", DoctorStatus.WARN, f"{tool.name} printed no frame: {why(res)}")
