"""GPU probes: does NVML answer (the stock 5.0 dashboard exits without util/gpu_percent), and
can the 5.0 pin's CUDA build run here (nvcc, a GPU, the libraries build.sh links)?

NVML is read in a child interpreter (`nvml_report`), through pynvml when installed, else
through ctypes with the same calls the 5.0 trainer makes."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.doctor.model import Probe, ProbeContext, why
from harness.doctor.tools import version_line
from harness.process.tools import run_tool

NO_NVML = (
    "no NVML: the stock 5.0 dashboard exits on missing util/gpu_percent; the replica "
    "reproduces this"
)
_NVML_HINT = (
    "run with the NVIDIA container runtime (--gpus all) so the driver's libnvidia-ml is "
    "mounted; without a GPU use the replica (REPLICA_CONTEXT=bare shows the missing-key exit)"
)
NO_GPU = "the 5.0 pin cannot build or run here; the replica and PufferLib 3.0.0 can"

# ----------------------------------------------------------------------------- NVML


def probe_nvml(ctx: ProbeContext) -> Probe:
    """NVML runs in a child interpreter: a broken driver stack can hang or segfault inside
    nvmlInit, and neither may take the doctor down."""
    root = str(Path(__file__).resolve().parents[2])  # the folder holding `harness`
    env = {
        **ctx.env,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, ctx.env.get("PYTHONPATH")])),
    }
    code = "from harness.doctor.gpu import nvml_report; nvml_report()"
    res = run_tool([sys.executable, "-c", code], ctx.timeout_s, env=env)
    if res.timed_out:
        return Probe("", "warn", f"NVML did not answer within {ctx.timeout_s:g}s")
    try:
        data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return Probe("", "warn", f"the NVML probe process failed: {why(res)}")
    return judge_nvml(data)


def judge_nvml(data: dict[str, Any]) -> Probe:
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


def probe_cuda(ctx: ProbeContext) -> Probe:
    nvcc = ctx.which("nvcc")
    nvcc_text = "no nvcc"
    if nvcc:
        res = ctx.run([nvcc, "--version"])
        nvcc_text = version_line(res.stdout, "release") if res.returncode == 0 else "nvcc broken"
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


def _gpus(ctx: ProbeContext) -> str:
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


def _find_cuda_libs(ctx: ProbeContext, nvcc: str | None) -> set[str]:
    found: set[str] = set()
    listing = _ldconfig_listing(ctx)
    dirs = _cuda_dirs(nvcc)
    for lib in _CUDA_LIBS:
        stem = f"lib{lib}.so"
        in_cache = re.search(rf"^\s*{re.escape(stem)}", listing, re.M)
        if in_cache or any(next(d.glob(f"{stem}*"), None) for d in dirs):
            found.add(lib)
    return found


def _ldconfig_listing(ctx: ProbeContext) -> str:
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
