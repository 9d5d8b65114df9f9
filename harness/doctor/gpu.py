"""GPU probes: does NVML answer (the stock 5.0 dashboard exits without util/gpu_percent), and
can the 5.0 pin's CUDA build run here (nvcc, a GPU, the libraries build.sh links)?

NVML is read in a child interpreter (`nvml_report`) through the doctor's one NVML reader
(nvml.py: pynvml when installed, else ctypes with the same calls the 5.0 trainer makes)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.doctor import nvml
from harness.doctor.model import Probe, ProbeContext, why
from harness.doctor.tools import version_line
from harness.process.tools import run_tool
from harness.vocab import DoctorStatus

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
        return Probe("", DoctorStatus.WARN, f"NVML did not answer within {ctx.timeout_s:g}s")
    try:
        data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return Probe("", DoctorStatus.WARN, f"the NVML probe process failed: {why(res)}")
    return judge_nvml(data)


def judge_nvml(data: dict[str, Any]) -> Probe:
    via = data.get("binding", "?")
    if "absent" in data:
        return Probe("", DoctorStatus.WARN, f"{NO_NVML} ({via}: {data['absent']})", _NVML_HINT)
    if "error" in data:
        detail = f"NVML loads but fails: {data['error']} ({via})"
        hint = "the 5.0 trainer ignores NVML return codes and may show garbage util/gpu_percent"
        return Probe("", DoctorStatus.WARN, detail, hint)
    if not data.get("count"):
        return Probe(
            "", DoctorStatus.WARN, f"NVML sees no GPU ({via})", "util/gpu_percent will be garbage"
        )
    util = f"device 0 utilization gpu {data.get('gpu')}% mem {data.get('mem')}%"
    return Probe("", DoctorStatus.OK, f"{data['count']} GPU(s); {util} ({via})")


def nvml_report() -> None:
    """Child side of the NVML probe: print one JSON line of what NVML answered."""
    print(json.dumps(read_device0()), flush=True)


def read_device0() -> dict[str, Any]:
    """{binding, count, gpu, mem} of device 0, or {binding, absent|error: why}."""
    out: dict[str, Any] = {"binding": nvml.binding()}
    try:
        with nvml.open_nvml() as lib:
            out["count"] = lib.device_count()
            if out["count"]:
                rates = lib.utilization(lib.handle(0))
                out["gpu"], out["mem"] = rates.gpu, rates.memory
    except nvml.NvmlAbsent as exc:
        out["absent"] = str(exc)
    except nvml.NvmlError as exc:
        out["error"] = str(exc)
    return out


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
        return Probe("", DoctorStatus.WARN, f"{NO_GPU} ({detail})", _cuda_hint(missing))
    if nvcc is None or missing:
        return Probe("", DoctorStatus.WARN, detail, _cuda_hint(missing))
    return Probe("", DoctorStatus.OK, detail)


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
