"""Platform probes: can this machine build and run the trainer, and can the harness see
inside a hang here (OpenMP, the libgomp fork hazard, ptrace, py-spy, NVML, CUDA, cgroups)?

Every probe is bounded by a timeout and guarded: one that fails or raises never stops the
others. Every external command goes through `tools.run_tool` (own session, hard
timeout, whole group killed); the few long-lived targets we start ourselves (a process to
attach to) are killed and reaped in a `finally`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import importlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.process import tools

STATUSES = ("ok", "warn", "fail", "skip")
SCHEMA = "harness-doctor/1"

# The child of the fork probe gets this long before we call it hung; a fork-safe runtime
# finishes in milliseconds, so a few seconds is a clear verdict without slowing the doctor.
FORK_LIMIT_S = 3.0

FORK_HAZARD = (
    "this OpenMP runtime deadlocks in a forked child (libgomp fork hazard): containerized "
    "trainers that fork after OpenMP will hang"
)
PTRACE_HINT = (
    "ptrace denied: run the container with --cap-add=SYS_PTRACE, or set "
    "kernel.yama.ptrace_scope=0; the harness then falls back to /proc samples without stacks"
)
NO_NVML = (
    "no NVML: the stock 5.0 dashboard exits on missing util/gpu_percent; the replica "
    "reproduces this"
)
_NVML_HINT = (
    "run with the NVIDIA container runtime (--gpus all) so the driver's libnvidia-ml is "
    "mounted; without a GPU use the replica (REPLICA_CONTEXT=bare shows the missing-key exit)"
)
NO_GPU = "the 5.0 pin cannot build or run here; the replica and PufferLib 3.0.0 can"

_DENIED = ("operation not permitted", "permission denied", "eperm")
# OpenMP settings that change how a blocked team looks (spin vs futex) or its size
_OMP_VARS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OMP_DYNAMIC",
    "OMP_THREAD_LIMIT",
    "OMP_PROC_BIND",
)
_CAP_SYS_PTRACE = 19
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number


@dataclass
class Probe:
    name: str
    status: str  # "ok" | "warn" | "fail" | "skip"
    detail: str
    hint: str = ""
    duration_s: float = 0.0


@dataclass
class _Ctx:
    """What every probe shares: its time budget and the PATH its tools come from."""

    timeout_s: float
    path: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, timeout_s: float, path: str | None) -> _Ctx:
        path = os.environ.get("PATH", os.defpath) if path is None else path
        return cls(timeout_s, path, {**os.environ, "PATH": path})

    def which(self, name: str) -> str | None:
        """A tool on our PATH; py-spy also next to this interpreter (a pip dependency sits
        in the venv's bin, which is not on PATH when run as `.venv/bin/harness`)."""
        found = shutil.which(name, path=self.path)
        if found is None and name == "py-spy":
            candidate = Path(sys.executable).parent / name
            found = str(candidate) if os.access(candidate, os.X_OK) else None
        return found

    def run(self, argv: Sequence[str], timeout: float | None = None) -> tools.ToolResult:
        return tools.run_tool(argv, timeout or self.timeout_s, env=self.env)


# ----------------------------------------------------------------------------- driver


def run_doctor(timeout_s: float = 10.0, *, path: str | None = None) -> list[Probe]:
    """Run every probe in order; `path` replaces PATH for finding tools (tests use it)."""
    ctx = _Ctx.make(timeout_s, path)
    return [_guarded(name, fn, ctx) for name, fn in _probes()]


def _probes() -> list[tuple[str, Callable[[_Ctx], Probe]]]:
    tools = [(f"tool:{t.name}", functools.partial(_probe_tool, t)) for t in _TOOLS]
    return [
        *tools,
        ("openmp", _probe_openmp),
        ("openmp-after-fork", _probe_openmp_fork),
        ("ptrace", _probe_ptrace),
        ("py-spy", _probe_py_spy),
        ("nvml", _probe_nvml),
        ("cuda", _probe_cuda),
        ("cpu/container", _probe_cpu),
    ]


def _guarded(name: str, fn: Callable[[_Ctx], Probe], ctx: _Ctx) -> Probe:
    """A probe that raises is a harness bug, not a platform fact: report it and go on."""
    start = time.monotonic()
    try:
        probe = fn(ctx)
    except Exception as exc:
        probe = Probe(name, "warn", f"the probe itself failed: {exc!r}")
    probe.name = name
    probe.duration_s = round(time.monotonic() - start, 3)
    return probe


# ----------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class _Tool:
    name: str
    missing: str  # status when absent
    hint: str
    marker: str = ""  # the version line contains this (nvcc prints a banner first)


_TOOLS = (
    _Tool("gcc", "fail", "install gcc with libgomp: the replica and 5.0 build with -fopenmp"),
    _Tool(
        "gdb",
        "warn",
        "native stacks degrade to eu-stack (no arguments, fewer names); install gdb",
    ),
    _Tool("eu-stack", "warn", "install elfutils: the fallback when gdb cannot unwind"),
    _Tool("py-spy", "warn", "pip install py-spy: Python trainers (3.0.0) get no Python stacks"),
    _Tool("git", "warn", "install git: pins, upstream checkouts and bisect need it"),
    _Tool("ccache", "warn", "install ccache: the 5.0 build.sh requires it"),
    _Tool("nvcc", "warn", "needed only to build the 5.0 pin (CUDA toolkit)", "release"),
)


def _probe_tool(tool: _Tool, ctx: _Ctx) -> Probe:
    exe = ctx.which(tool.name)
    if exe is None:
        return Probe("", tool.missing, f"{tool.name} not found on PATH", _missing_hint(tool, ctx))
    res = ctx.run([exe, "--version"])
    if res.returncode != 0:
        return Probe("", "warn", f"{exe} --version failed: {_why(res)}", tool.hint)
    detail = f"{_version_line(res.stdout + res.stderr, tool.marker)} ({exe})"
    if tool.name == "gcc":
        return _check_gomp_links(exe, detail, ctx)
    return Probe("", "ok", detail)


def _missing_hint(tool: _Tool, ctx: _Ctx) -> str:
    if tool.name == "gdb" and ctx.which("eu-stack") is None:
        return "eu-stack is missing too: samples will have no native stacks; install gdb"
    return tool.hint


def _version_line(text: str, marker: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = [ln for ln in lines if marker in ln] if marker else lines
    return (picked or lines or ["(no version output)"])[0][:120]


def _check_gomp_links(gcc: str, detail: str, ctx: _Ctx) -> Probe:
    """A gcc without libgomp compiles the replica's pragmas away or fails at link time."""
    with _tempdir() as tmp:
        src = tmp / "empty.c"
        src.write_text("int main(void) { return 0; }\n")
        res = ctx.run([gcc, "-fopenmp", str(src), "-o", str(tmp / "empty")])
    if res.returncode != 0:
        why = f"gcc -fopenmp does not link: {_why(res)}"
        return Probe("", "fail", f"{detail}; {why}", "install libgomp (e.g. apt-get install gcc)")
    return Probe("", "ok", f"{detail}; -fopenmp links")


# ----------------------------------------------------------------------------- OpenMP

_OMP_SOURCE = r"""
#include <omp.h>
#include <stdio.h>
int main(void) {
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    printf("team=%d max=%d\n", team, omp_get_max_threads());
    return 0;
}
"""

# Parent: a 2-thread team (so libgomp keeps a pool), then fork(); the child runs a region in
# its main thread. The parent polls for the child, records where it sits, and kills it at
# the deadline itself, so the probe never depends on the harness to clean up.
_FORK_SOURCE = r"""
#define _GNU_SOURCE
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int team_size(void) {
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    return team;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)n, f)) snprintf(buf, n, "?");
    if (f) fclose(f);
    buf[strcspn(buf, "\n")] = 0;
}

static void describe(pid_t pid) {
    char path[64], stat[512], wchan[128];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    read_line(path, stat, sizeof stat);
    snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
    read_line(path, wchan, sizeof wchan);
    char *end = strrchr(stat, ')');
    printf("child-state=%c wchan=%s\n", end && end[1] ? end[2] : '?', wchan);
}

int main(int argc, char **argv) {
    double limit = argc > 1 ? atof(argv[1]) : 3.0;
    printf("parent-team=%d\n", team_size());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) { perror("fork"); return 3; }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(100);
        _exit(team_size());
    }
    int status = 0;
    for (double deadline = now() + limit; now() < deadline;) {
        if (waitpid(child, &status, WNOHANG) == child) {
            printf("child-done team=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            return 0;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    describe(child);
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    printf("child-hung after=%.1fs\n", limit);
    return 0;
}
"""

_OMP_FIX_HINT = (
    "fork before the first parallel region, exec() in the child, or start the child's "
    "OpenMP from a new pthread (it gets a fresh pool); LLVM libomp resets itself after fork"
)


@contextlib.contextmanager
def _tempdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="harness-doctor-") as tmp:
        yield Path(tmp)


def _compile_omp(source: str, tmp: Path, ctx: _Ctx) -> tuple[Path | None, str]:
    """(binary, "") or (None, why it could not be built)."""
    gcc = ctx.which("gcc")
    if gcc is None:
        return None, "gcc not found on PATH"
    src, binary = tmp / "probe.c", tmp / "probe"
    src.write_text(source)
    res = ctx.run([gcc, "-O1", "-fopenmp", str(src), "-o", str(binary)])
    if res.returncode != 0:
        return None, f"gcc -fopenmp failed: {_why(res)}"
    return binary, ""


def _omp_runtime(binary: Path, ctx: _Ctx) -> str:
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


def _probe_openmp(ctx: _Ctx) -> Probe:
    with _tempdir() as tmp:
        binary, why = _compile_omp(_OMP_SOURCE, tmp, ctx)
        if binary is None:
            return Probe("", "fail", why, "install gcc with libgomp")
        runtime = _omp_runtime(binary, ctx)
        res = ctx.run([str(binary)])
    if res.returncode != 0:
        return Probe("", "fail", f"a plain parallel region failed: {_why(res)}; {runtime}")
    m = re.search(r"team=(\d+) max=(\d+)", res.stdout)
    team = int(m.group(1)) if m else 0
    detail = f"team of {team} (default max {m.group(2) if m else '?'}); {runtime}{_omp_env()}"
    if team < 2:
        return Probe("", "warn", detail, "OMP_THREAD_LIMIT or OMP_DYNAMIC caps teams at 1")
    return Probe("", "ok", detail)


def _probe_openmp_fork(ctx: _Ctx) -> Probe:
    limit = min(FORK_LIMIT_S, ctx.timeout_s)
    with _tempdir() as tmp:
        binary, why = _compile_omp(_FORK_SOURCE, tmp, ctx)
        if binary is None:
            return Probe("", "skip", f"cannot build the fork probe: {why}")
        runtime = _omp_runtime(binary, ctx)
        # the program kills its child at `limit`; our timeout is the backstop for the parent
        res = ctx.run([str(binary), f"{limit:.1f}"], timeout=limit + 2.0)
    return _judge_fork(res, runtime, limit)


def _judge_fork(res: tools.ToolResult, runtime: str, limit: float) -> Probe:
    out = res.stdout
    if res.timed_out or "child-hung" in out:
        where = re.search(r"child-state=(\S) wchan=(\S+)", out)
        seen = f"child state {where.group(1)} in {where.group(2)}" if where else "probe killed"
        detail = f"{FORK_HAZARD}; child hung > {limit:.1f}s ({seen}); {runtime}"
        return Probe("", "warn", detail, _OMP_FIX_HINT)
    done = re.search(r"child-done team=(-?\d+)", out)
    if res.returncode == 0 and done:
        return Probe("", "ok", f"fork-safe OpenMP runtime (child team {done.group(1)}); {runtime}")
    return Probe("", "warn", f"the fork probe failed: {_why(res)}; {runtime}")


# ----------------------------------------------------------------------------- ptrace


def _ptrace_context() -> str:
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    cap = _has_cap(_CAP_SYS_PTRACE)
    cap_text = "unknown" if cap is None else ("yes" if cap else "no")
    return f"ptrace_scope={scope.strip() if scope else 'n/a'}, CAP_SYS_PTRACE={cap_text}"


def _has_cap(bit: int) -> bool | None:
    status = _read("/proc/self/status") or ""
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


def _attach_argv(ctx: _Ctx, pid: int) -> tuple[list[str], str] | None:
    """How to attach as a sibling of the target, the way the sampler attaches to a trainer
    (at ptrace_scope=1 a parent may trace its child, but not a sibling)."""
    gdb = ctx.which("gdb")
    if gdb:
        quiet = ["-batch", "-nx", "-iex", "set debuginfod enabled off"]
        return [gdb, "-p", str(pid), *quiet, "-ex", "info threads"], f"(LWP {pid})"
    eu = ctx.which("eu-stack")
    return ([eu, "-p", str(pid)], f"PID {pid}") if eu else None


def _probe_ptrace(ctx: _Ctx) -> Probe:
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
    if any(m in output.lower() for m in _DENIED):
        return Probe("", "fail", f"{tool}: {_why(res)}; {context}", PTRACE_HINT)
    return Probe("", "fail", f"{tool} could not attach: {_why(res)}; {context}", PTRACE_HINT)


# ----------------------------------------------------------------------------- py-spy

_PY_TARGET = (
    "import sys, time\n"
    "def doctor_wait():\n"
    "    print('ready', flush=True)\n"
    "    while True:\n"
    "        time.sleep(0.05)\n"
    "doctor_wait()\n"
)


def _probe_py_spy(ctx: _Ctx) -> Probe:
    py_spy = ctx.which("py-spy")
    if py_spy is None:
        return Probe("", "skip", "py-spy not found (PATH or next to the interpreter)")
    with _target([sys.executable, "-c", _PY_TARGET], ready="ready") as target:
        res = ctx.run([py_spy, "dump", "--pid", str(target.pid)])
    if re.search(r"doctor_wait \(", res.stdout):
        return Probe("", "ok", "py-spy dumped the frames of a Python child")
    if res.timed_out:
        return Probe("", "fail", f"py-spy dump did not finish within {ctx.timeout_s:g}s")
    if any(m in (res.stdout + res.stderr).lower() for m in _DENIED):
        return Probe("", "fail", f"py-spy: {_why(res)}", PTRACE_HINT)
    return Probe("", "warn", f"py-spy printed no frame: {_why(res)}")


# ----------------------------------------------------------------------------- NVML


def _probe_nvml(ctx: _Ctx) -> Probe:
    """NVML runs in a child interpreter: a broken driver stack can hang or segfault inside
    nvmlInit, and neither may take the doctor down."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {
        **ctx.env,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, ctx.env.get("PYTHONPATH")])),
    }
    code = "from harness.doctor import nvml_report; nvml_report()"
    res = tools.run_tool([sys.executable, "-c", code], ctx.timeout_s, env=env)
    if res.timed_out:
        return Probe("", "warn", f"NVML did not answer within {ctx.timeout_s:g}s")
    try:
        data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return Probe("", "warn", f"the NVML probe process failed: {_why(res)}")
    return _judge_nvml(data)


def _judge_nvml(data: dict[str, Any]) -> Probe:
    via = data.get("binding", "?")
    if "absent" in data:
        return Probe("", "warn", f"{NO_NVML} ({via}: {data['absent']})", _NVML_HINT)
    if "error" in data:
        detail = f"NVML loads but fails: {data['error']} ({via})"
        hint = "the 5.0 trainer ignores NVML return codes and may show garbage util/gpu_percent"
        return Probe("", "warn", detail, hint)
    if not data.get("count"):
        return Probe("", "warn", f"NVML sees no GPU ({via})", "util/gpu_percent will be garbage")
    util = f"device 0 utilization gpu {data.get('gpu')}% mem {data.get('mem')}%"
    return Probe("", "ok", f"{data['count']} GPU(s); {util} ({via})")


def nvml_report() -> None:
    """Child side of the NVML probe: print one JSON line of what NVML answered."""
    try:
        module: ModuleType | None = importlib.import_module("pynvml")
    except ImportError:
        module = None
    data = _nvml_pynvml(module) if module is not None else _nvml_ctypes()
    print(json.dumps(data), flush=True)


def _nvml_pynvml(m: ModuleType) -> dict[str, Any]:
    out: dict[str, Any] = {"binding": "pynvml"}
    try:
        m.nvmlInit()
    except m.NVMLError as exc:
        absent = type(exc).__name__ == "NVMLError_LibraryNotFound"
        out["absent" if absent else "error"] = f"nvmlInit: {exc}"
        return out
    try:
        out["count"] = int(m.nvmlDeviceGetCount())
        if out["count"]:
            rates = m.nvmlDeviceGetUtilizationRates(m.nvmlDeviceGetHandleByIndex(0))
            out["gpu"], out["mem"] = int(rates.gpu), int(rates.memory)
    except m.NVMLError as exc:
        out["error"] = str(exc)
    finally:
        with contextlib.suppress(Exception):
            m.nvmlShutdown()
    return out


class _Utilization(ctypes.Structure):
    _fields_ = (("gpu", ctypes.c_uint), ("memory", ctypes.c_uint))


def _nvml_ctypes() -> dict[str, Any]:
    """The same calls the 5.0 trainer makes, with their return codes checked."""
    out: dict[str, Any] = {"binding": "ctypes"}
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        out["absent"] = str(exc)
        return out
    try:
        _nvml_call(lib, "nvmlInit_v2")
    except (LookupError, RuntimeError) as exc:
        out["error"] = str(exc)
        return out
    try:
        out.update(_nvml_device0(lib))
    except (LookupError, RuntimeError) as exc:
        out["error"] = str(exc)
    finally:
        with contextlib.suppress(LookupError, RuntimeError):
            _nvml_call(lib, "nvmlShutdown")
    return out


def _nvml_device0(lib: ctypes.CDLL) -> dict[str, Any]:
    count = ctypes.c_uint(0)
    _nvml_call(lib, "nvmlDeviceGetCount_v2", ctypes.byref(count))
    if count.value == 0:
        return {"count": 0}
    handle = ctypes.c_void_p()
    _nvml_call(lib, "nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(0), ctypes.byref(handle))
    rates = _Utilization()
    _nvml_call(lib, "nvmlDeviceGetUtilizationRates", handle, ctypes.byref(rates))
    return {"count": count.value, "gpu": rates.gpu, "mem": rates.memory}


def _nvml_call(lib: ctypes.CDLL, name: str, *args: Any) -> None:
    """Call an NVML function; a partial library (symbol missing) is a LookupError."""
    fn = getattr(lib, name, None)
    if fn is None:
        raise LookupError(f"{name} missing from libnvidia-ml")
    rc = int(fn(*args))
    if rc != 0:
        raise RuntimeError(f"{name} returned {rc} ({_nvml_error(lib, rc)})")


def _nvml_error(lib: ctypes.CDLL, rc: int) -> str:
    fn = getattr(lib, "nvmlErrorString", None)
    if fn is None:
        return "no nvmlErrorString"
    fn.restype = ctypes.c_char_p
    text = fn(rc)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else "?"


# ----------------------------------------------------------------------------- CUDA

# what the 5.0 build.sh links besides the host OpenMP runtime and GL
_CUDA_LIBS = ("cudart", "cublas", "cusolver", "curand", "nccl", "nvidia-ml")


def _probe_cuda(ctx: _Ctx) -> Probe:
    nvcc = ctx.which("nvcc")
    nvcc_text = "no nvcc"
    if nvcc:
        res = ctx.run([nvcc, "--version"])
        nvcc_text = _version_line(res.stdout, "release") if res.returncode == 0 else "nvcc broken"
    gpus = _gpus(ctx)
    found = _find_cuda_libs(ctx, nvcc)
    missing = [lib for lib in _CUDA_LIBS if lib not in found]
    libs = f"libs missing: {', '.join(missing)}" if missing else "all CUDA libs found"
    detail = f"{nvcc_text}; {gpus or 'no GPU'}; {libs}"
    if not gpus:
        return Probe("", "warn", f"{NO_GPU} ({detail})", _cuda_hint(missing))
    if nvcc is None or missing:
        return Probe("", "warn", detail, _cuda_hint(missing))
    return Probe("", "ok", detail)


def _cuda_hint(missing: Sequence[str]) -> str:
    if not missing:
        return ""
    return f"the 5.0 build links {', '.join(_CUDA_LIBS)}: install the CUDA toolkit and NCCL"


def _gpus(ctx: _Ctx) -> str:
    """'2 GPU(s): NVIDIA RTX A6000, ...' from nvidia-smi -L, else device nodes, else ''."""
    smi = ctx.which("nvidia-smi")
    if smi:
        res = ctx.run([smi, "-L"])
        names = [
            ln.split(":", 1)[1].split("(")[0].strip()
            for ln in res.stdout.splitlines()
            if ln.startswith("GPU ") and ":" in ln
        ]
        if names:
            return f"{len(names)} GPU(s): {', '.join(names)}"
    nodes = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*"))
    return f"device nodes {', '.join(nodes)} (nvidia-smi gave no GPU)" if nodes else ""


def _find_cuda_libs(ctx: _Ctx, nvcc: str | None) -> set[str]:
    found: set[str] = set()
    listing = _ldconfig_listing(ctx)
    dirs = _cuda_dirs(nvcc)
    for lib in _CUDA_LIBS:
        stem = f"lib{lib}.so"
        in_cache = re.search(rf"^\s*{re.escape(stem)}", listing, re.M)
        if in_cache or any(next(d.glob(f"{stem}*"), None) for d in dirs):
            found.add(lib)
    return found


def _ldconfig_listing(ctx: _Ctx) -> str:
    # ldconfig lives in /sbin, which a non-root PATH may not hold
    candidates = [ctx.which("ldconfig"), "/sbin/ldconfig", "/usr/sbin/ldconfig"]
    exe = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    return ctx.run([exe, "-p"]).stdout if exe else ""


def _cuda_dirs(nvcc: str | None) -> list[Path]:
    """Library folders of the toolkit the build would use (CUDA_HOME, nvcc's, the default)."""
    roots = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    subs = ("lib64", "lib", "targets/x86_64-linux/lib")
    return [Path(r) / s for r in roots if r for s in subs if (Path(r) / s).is_dir()]


# ----------------------------------------------------------------------------- CPU/container


def _probe_cpu(ctx: _Ctx) -> Probe:
    del ctx  # reads files only
    cpus = os.cpu_count() or 0
    affinity = len(os.sched_getaffinity(0))
    quota = _cpu_quota()
    effective = min(affinity, quota) if quota else affinity
    quota_text = f"cgroup cpu quota {quota:g}" if quota else "no cgroup cpu quota"
    detail = (
        f"{cpus} CPUs, {affinity} usable ({quota_text}); memory {_memory_limit()}; "
        f"container: {_container() or 'none detected'}"
    )
    if effective < 2:
        hint = "the 5.0 workers busy-spin without yielding: on < 2 CPUs a run crawls like a hang"
        return Probe("", "warn", detail, hint)
    return Probe("", "ok", detail)


def _cpu_quota() -> float | None:
    """CPUs granted by the cgroup (v2 cpu.max, else v1 cfs quota), None when unlimited."""
    v2 = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    if len(v2) == 2 and v2[0] != "max":
        return int(v2[0]) / int(v2[1])
    for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        quota = (_read(f"{base}/cpu.cfs_quota_us") or "").strip()
        period = (_read(f"{base}/cpu.cfs_period_us") or "").strip()
        if quota.lstrip("-").isdigit() and period.isdigit() and int(quota) > 0:
            return int(quota) / int(period)
    return None


def _memory_limit() -> str:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (_read(path) or "").strip()
        if text.isdigit() and int(text) < _UNLIMITED:
            return f"limit {int(text) / 2**30:.1f} GiB"
    return "no cgroup limit"


def _container() -> str:
    marks = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    # systemd-nspawn and podman announce themselves in a lowercase `container` variable
    engine = os.environ.get("container")  # noqa: SIM112
    if engine:
        marks.append(f"container={engine}")
    cgroup = _read("/proc/1/cgroup") or ""
    engines = ("docker", "kubepods", "containerd", "libpod", "lxc")
    marks += [f"cgroup {e}" for e in engines if e in cgroup]
    return ", ".join(marks)


# ----------------------------------------------------------------------------- helpers


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _why(res: tools.ToolResult) -> str:
    """One line saying how a tool run ended."""
    if res.timed_out:
        return f"timed out after {res.duration_s:.1f}s"
    lines = [ln.strip() for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.startswith(("[", "Using host"))), "no output")
    return f"exit {res.returncode}: {first[:160]}"


# ----------------------------------------------------------------------------- output


def counts(probes: Sequence[Probe]) -> dict[str, int]:
    return {s: sum(p.status == s for p in probes) for s in STATUSES}


def render(probes: Sequence[Probe], width: int = 100) -> str:
    """A plain-text table: name, status, time, detail (wrapped), hint on its own line."""
    name_w = max([len("PROBE"), *(len(p.name) for p in probes)])
    lead = name_w + 16  # name, 2 spaces, status (6), space, time (6), space
    summary = ", ".join(f"{n} {s}" for s, n in counts(probes).items())
    lines = [f"harness doctor: {len(probes)} probes ({summary})", ""]
    lines.append(f"{'PROBE':<{name_w}}  STATUS   TIME DETAIL")
    for p in probes:
        head = f"{p.name:<{name_w}}  {p.status:<6} {p.duration_s:>5.1f}s "
        lines += _wrap(p.detail, head, lead, width)
        if p.hint:
            lines += _wrap(f"hint: {p.hint}", " " * lead, lead, width)
    return "\n".join(lines) + "\n"


def _wrap(text: str, first: str, indent: int, width: int) -> list[str]:
    return textwrap.wrap(
        text,
        width=max(width, indent + 30),
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def to_json(probes: Sequence[Probe]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "ok": not any(p.status == "fail" for p in probes),
        "counts": counts(probes),
        "probes": [asdict(p) for p in probes],
    }


def main(args: argparse.Namespace) -> int:
    """`harness doctor [--json] [--timeout S]`: 1 when any probe fails, else 0."""
    timeout = getattr(args, "timeout", None) or 10.0
    probes = run_doctor(float(timeout))
    if getattr(args, "json", False):
        print(json.dumps(to_json(probes), indent=2))
    else:
        print(render(probes), end="")
    return 1 if any(p.status == "fail" for p in probes) else 0
