"""Can the harness see inside a hang here: ptrace (gdb or eu-stack attaching to a sibling, the
way the sampler attaches to a trainer) and py-spy dumping a Python child's frames.

The targets we attach to are started by us, in their own session, and are killed and
reaped in a `finally` however the probe ends."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.doctor.model import Probe, ProbeContext, why
from harness.files import read_text
from harness.process.tools import permission_denied

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


@contextlib.contextmanager
def _target(argv: Sequence[str], ready: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """A process to attach to, in its own session; SIGKILLed and reaped however we leave.

    With `ready`, wait (bounded) until it prints that line, so a tool does not attach to
    an interpreter that has not started its frames yet.
    """
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if ready else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if ready and proc.stdout is not None:
            select.select([proc.stdout], [], [], 5.0)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


def _sleeper() -> list[str]:
    sleep = shutil.which("sleep")
    return [sleep, "30"] if sleep else [sys.executable, "-c", "import time; time.sleep(30)"]


def _attach_argv(ctx: ProbeContext, pid: int) -> tuple[list[str], str] | None:
    """How to attach as a sibling of the target, the way the sampler attaches to a trainer
    (at ptrace_scope=1 a parent may trace its child, but not a sibling)."""
    gdb = ctx.which("gdb")
    if gdb:
        quiet = ["-batch", "-nx", "-iex", "set debuginfod enabled off"]
        return [gdb, "-p", str(pid), *quiet, "-ex", "info threads"], f"(LWP {pid})"
    eu = ctx.which("eu-stack")
    return ([eu, "-p", str(pid)], f"PID {pid}") if eu else None


def probe_ptrace(ctx: ProbeContext) -> Probe:
    context = _ptrace_context()
    with _target(_sleeper()) as target:
        plan = _attach_argv(ctx, target.pid)
        if plan is None:
            return Probe("", "skip", f"no gdb or eu-stack to attach with; {context}")
        argv, success = plan
        res = ctx.run(argv)
    tool = Path(argv[0]).name
    output = res.stdout + res.stderr
    if success in output:
        return Probe("", "ok", f"{tool} attached to a sibling process; {context}")
    if res.timed_out:
        return Probe("", "fail", f"{tool} did not attach within {ctx.timeout_s:g}s; {context}")
    if permission_denied(output):
        return Probe("", "fail", f"{tool}: {why(res)}; {context}", PTRACE_HINT)
    return Probe("", "fail", f"{tool} could not attach: {why(res)}; {context}", PTRACE_HINT)


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
    py_spy = ctx.which("py-spy")
    if py_spy is None:
        return Probe("", "skip", "py-spy not found (PATH or next to the interpreter)")
    with _target([sys.executable, "-c", _PY_TARGET], ready="ready") as target:
        res = ctx.run([py_spy, "dump", "--pid", str(target.pid)])
    if re.search(r"doctor_wait \(", res.stdout):
        return Probe("", "ok", "py-spy dumped the frames of a Python child")
    if res.timed_out:
        return Probe("", "fail", f"py-spy dump did not finish within {ctx.timeout_s:g}s")
    if permission_denied(res.stdout + res.stderr):
        return Probe("", "fail", f"py-spy: {why(res)}", PTRACE_HINT)
    return Probe("", "warn", f"py-spy printed no frame: {why(res)}")
