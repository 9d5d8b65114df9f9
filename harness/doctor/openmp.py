"""OpenMP probes: does a plain parallel region run (and which runtime the loader picks), and
does this runtime survive fork() after a parallel region (the libgomp fork hazard)?"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.doctor.model import Probe, ProbeContext, c_source, tempdir, why
from harness.process.tools import ToolResult
from harness.vocab import DoctorStatus

# The child of the fork probe gets this long before we call it hung; a fork-safe runtime
# finishes in milliseconds, so a few seconds is a clear verdict without slowing the doctor.
FORK_LIMIT_S = 3.0

FORK_HAZARD = (
    "this OpenMP runtime deadlocks in a forked child (libgomp fork hazard): containerized "
    "trainers that fork after OpenMP will hang"
)

# OpenMP settings that change how a blocked team looks (spin vs futex) or its size
_OMP_VARS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OMP_DYNAMIC",
    "OMP_THREAD_LIMIT",
    "OMP_PROC_BIND",
)

# omp_team.c: one 2-thread region, prints "team=N max=M".
_OMP_SOURCE = "omp_team.c"
# omp_after_fork.c: a 2-thread team (so libgomp keeps a pool), then fork(); the child runs a
# region in its main thread. The program polls for the child, records where it sits, and
# kills it at the deadline itself, so the probe never depends on the harness to clean up.
_FORK_SOURCE = "omp_after_fork.c"

_OMP_FIX_HINT = (
    "fork before the first parallel region, exec() in the child, or start the child's "
    "OpenMP from a new pthread (it gets a fresh pool); LLVM libomp resets itself after fork"
)


def _compile_omp(source: str, tmp: Path, ctx: ProbeContext) -> tuple[Path | None, str]:
    """(binary, "") or (None, why it could not be built)."""
    gcc = ctx.which("gcc")
    if gcc is None:
        return None, "gcc not found on PATH"
    src, binary = tmp / "probe.c", tmp / "probe"
    src.write_text(c_source(source))
    res = ctx.run([gcc, "-O1", "-fopenmp", str(src), "-o", str(binary)])
    if res.returncode != 0:
        return None, f"gcc -fopenmp failed: {why(res)}"
    return binary, ""


def _omp_runtime(binary: Path, ctx: ProbeContext) -> str:
    """Which OpenMP runtime the loader picks (libgomp is the one with the fork hazard)."""
    ldd = ctx.which("ldd")
    if ldd is None:
        return "runtime unknown (no ldd)"
    res = ctx.run([ldd, str(binary)])
    for line in res.stdout.splitlines():
        m = re.match(r"\s*(lib(?:gomp|omp|iomp5)\S*)\s+=>\s+(\S+)", line)
        if m:
            return f"runtime {m.group(1)} => {m.group(2)}"
    return "runtime unknown (ldd names no libgomp/libomp)"


def _omp_env() -> str:
    set_vars = [f"{k}={os.environ[k]}" for k in _OMP_VARS if k in os.environ]
    return f"; env {' '.join(set_vars)}" if set_vars else ""


def probe_openmp(ctx: ProbeContext) -> Probe:
    with tempdir() as tmp:
        binary, reason = _compile_omp(_OMP_SOURCE, tmp, ctx)
        if binary is None:
            return Probe("", DoctorStatus.FAIL, reason, "install gcc with libgomp")
        runtime = _omp_runtime(binary, ctx)
        res = ctx.run([str(binary)])
    if res.returncode != 0:
        return Probe(
            "", DoctorStatus.FAIL, f"a plain parallel region failed: {why(res)}; {runtime}"
        )
    m = re.search(r"team=(\d+) max=(\d+)", res.stdout)
    team = int(m.group(1)) if m else 0
    detail = f"team of {team} (default max {m.group(2) if m else '?'}); {runtime}{_omp_env()}"
    if team < 2:
        return Probe(
            "", DoctorStatus.WARN, detail, "OMP_THREAD_LIMIT or OMP_DYNAMIC caps teams at 1"
        )
    return Probe("", DoctorStatus.OK, detail)


def probe_openmp_fork(ctx: ProbeContext) -> Probe:
    limit = min(FORK_LIMIT_S, ctx.timeout_s)
    with tempdir() as tmp:
        binary, reason = _compile_omp(_FORK_SOURCE, tmp, ctx)
        if binary is None:
            return Probe("", DoctorStatus.SKIP, f"cannot build the fork probe: {reason}")
        runtime = _omp_runtime(binary, ctx)
        # the program kills its child at `limit`; our timeout is the backstop for the parent
        res = ctx.run([str(binary), f"{limit:.1f}"], timeout=limit + 2.0)
    return judge_fork(res, runtime, limit)


def judge_fork(res: ToolResult, runtime: str, limit: float) -> Probe:
    out = res.stdout
    if res.timed_out or "child-hung" in out:
        where = re.search(r"child-state=(\S) wchan=(\S+)", out)
        seen = f"child state {where.group(1)} in {where.group(2)}" if where else "probe killed"
        detail = f"{FORK_HAZARD}; child hung > {limit:.1f}s ({seen}); {runtime}"
        return Probe("", DoctorStatus.WARN, detail, _OMP_FIX_HINT)
    done = re.search(r"child-done team=(-?\d+)", out)
    if res.returncode == 0 and done:
        return Probe(
            "", DoctorStatus.OK, f"fork-safe OpenMP runtime (child team {done.group(1)}); {runtime}"
        )
    return Probe("", DoctorStatus.WARN, f"the fork probe failed: {why(res)}; {runtime}")
