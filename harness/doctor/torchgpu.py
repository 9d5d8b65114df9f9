"""GPU checks through torch (the optional `gpu` extra): what the first report verified by
hand on the GPU host. CUDA context, a 3 GiB cudaMalloc and memset, pinned-memory async
copies, a cuBLAS matmul, and which of the dashboard's NVML-fed `util/*` values are readable.

Each check runs in its own child interpreter (`child`) under its own hard timeout
(`run_check`, through `run_tool`). A wedged CUDA driver can block any torch call, and it
must not hang the doctor. The child prints one JSON line: status, detail, hint. torch is
imported only there. In one doctor run, `gpu:cuda-init` runs first and decides for the
rest (`_Gate`). When it skips (no torch, no CUDA device), the other checks skip with the
same reason and start no child. When it fails, the device checks skip and `gpu:nvml-values`
still runs: NVML may answer when CUDA does not."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from harness import vocab
from harness.doctor import nvml
from harness.doctor.model import Probe, ProbeContext, ProbeFn, why
from harness.process.tools import run_tool
from harness.vocab import DoctorStatus

CHECKS = ("cuda-init", "alloc-3gb", "pinned-async", "cublas", "nvml-values")
NO_TORCH = (
    "torch is not installed (pip install 'puffer-harness[gpu]' or torch==2.13.0 for the CPU wheel)"
)
# a child gets twice the probe timeout: importing torch alone takes seconds
TIMEOUT_FACTOR = 2.0
ALLOC_BYTES = 3 << 30
PINNED_BYTES = 256 << 20
MATMUL_N = 2048
MATMUL_RTOL = 1e-4  # max |gpu - cpu| / max |cpu|, float32 with TF32 off
# the keys the 5.0 trainer fills from NVML device 0 (util/cpu_mem_gb is the host's RSS)
NVML_KEYS = ("util/gpu_percent", "util/vram_used_gb", "util/vram_total_gb")
_GIB = float(1 << 30)
_WEDGED_HINT = (
    "a CUDA call that never returns usually means a wedged driver or GPU: check nvidia-smi "
    "and dmesg (Xid errors); a process stuck in state D needs a GPU or driver reset"
)

# ----------------------------------------------------------------------------- parent side


def probes() -> list[tuple[str, ProbeFn]]:
    """The `gpu:*` probes of one doctor run, sharing one gate."""
    gate = _Gate()
    return [(f"gpu:{check}", functools.partial(gate.probe, check)) for check in CHECKS]


class _Gate:
    """`gpu:cuda-init` decides whether the other checks start a child at all."""

    def __init__(self) -> None:
        self.init: Probe | None = None

    def probe(self, check: str, ctx: ProbeContext) -> Probe:
        if check == "cuda-init":
            self.init = run_check(check, ctx)
            return self.init
        init = self.init or self.probe("cuda-init", ctx)
        if init.status == DoctorStatus.SKIP:
            return Probe("", DoctorStatus.SKIP, init.detail, init.hint)
        if init.status != DoctorStatus.OK and check != "nvml-values":
            return Probe(
                "", DoctorStatus.SKIP, f"needs gpu:cuda-init, which failed ({init.detail})"
            )
        return run_check(check, ctx)


def run_check(check: str, ctx: ProbeContext) -> Probe:
    """One check in a child interpreter, killed (whole session) after its time limit."""
    if check not in CHECKS:
        raise ValueError(f"unknown GPU check {check!r}")
    limit = ctx.timeout_s * TIMEOUT_FACTOR
    root = str(Path(__file__).resolve().parents[2])  # the folder holding `harness`
    env = {
        **ctx.env,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, ctx.env.get("PYTHONPATH")])),
    }
    code = f"from harness.doctor.torchgpu import child; child({check!r})"
    res = run_tool([sys.executable, "-c", code], limit, env=env)
    if res.timed_out:
        return Probe(
            "", DoctorStatus.FAIL, f"{why(res)} (limit {limit:g}s), child killed", _WEDGED_HINT
        )
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("{")), "")
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return Probe("", DoctorStatus.FAIL, f"the check's child died without a verdict: {why(res)}")
    try:
        status = vocab.parse(DoctorStatus, data.get("status"), "status")
    except ValueError:
        return Probe("", DoctorStatus.FAIL, f"the check's child gave no status: {line[:160]}")
    return Probe("", status, str(data.get("detail", "")), str(data.get("hint", "")))


# ----------------------------------------------------------------------------- child side


class _Skip(Exception):
    """The check has nothing to test with (no torch, no CUDA device)."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.hint = hint


def child(check: str) -> None:
    """Child side: run one check, print one JSON line {status, detail[, hint]}."""
    try:
        out = _CHILD_CHECKS[check]()
    except _Skip as skip:
        out = {"status": DoctorStatus.SKIP, "detail": str(skip), "hint": skip.hint}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        out = {"status": DoctorStatus.FAIL, "detail": f"{type(exc).__name__}: {first[:240]}"}
    print(json.dumps(out), flush=True)


def _cuda_torch() -> ModuleType:
    """torch with a CUDA device, or `_Skip` saying why not."""
    try:
        torch = importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise _Skip(NO_TORCH) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    if available:
        return torch
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    said = next((str(w.message).strip().splitlines()[0] for w in caught if str(w.message)), "")
    reason = f"torch {torch.__version__}: no CUDA device (torch.cuda.is_available() is False; "
    reason += f"{build}{': ' + said[:200] if said else ''})"
    nodes = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*"))
    hint = ""
    if nodes:
        hint = f"device nodes {', '.join(nodes)} exist: " + (
            "install a CUDA build of torch"
            if not torch.version.cuda
            else "the driver does not answer torch (driver too old for this CUDA build?)"
        )
    raise _Skip(reason, hint)


def _ok(detail: str) -> dict[str, str]:
    return {"status": DoctorStatus.OK, "detail": detail}


def _cuda_init() -> dict[str, str]:
    torch = _cuda_torch()
    start = time.monotonic()
    torch.cuda.init()
    torch.zeros(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    took = time.monotonic() - start
    count = int(torch.cuda.device_count())
    kinds: Counter[str] = Counter()
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        kinds[f"{p.name} (sm_{p.major}{p.minor}, {p.total_memory / _GIB:.0f} GiB)"] += 1
    devices = ", ".join(f"{n} x {k}" if n > 1 else k for k, n in kinds.items())
    return _ok(
        f"torch {torch.__version__}, CUDA runtime {torch.version.cuda}; {count} device(s): "
        f"{devices}; context on cuda:0 in {took:.2f}s"
    )


def _alloc_3gb() -> dict[str, str]:
    torch = _cuda_torch()
    free0, total = (int(v) for v in torch.cuda.mem_get_info(0))
    if free0 < ALLOC_BYTES:
        return {
            "status": DoctorStatus.WARN,
            "detail": f"only {free0 / _GIB:.2f} of {total / _GIB:.1f} GiB free on cuda:0: "
            "the 3 GiB allocation was not attempted",
            "hint": "another process holds the GPU's memory (nvidia-smi lists it)",
        }
    start = time.monotonic()
    buf = torch.empty(ALLOC_BYTES, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    alloc_s = time.monotonic() - start
    start = time.monotonic()
    buf.fill_(0xA5)
    torch.cuda.synchronize()
    fill_s = time.monotonic() - start
    free1 = int(torch.cuda.mem_get_info(0)[0])
    where = [0, 1, ALLOC_BYTES // 2, ALLOC_BYTES - 2, ALLOC_BYTES - 1]
    picked = [int(v) for v in buf[torch.tensor(where, device="cuda")].tolist()]
    lo, hi = int(buf.min()), int(buf.max())
    del buf
    torch.cuda.empty_cache()
    facts = (
        f"3 GiB on cuda:0: cudaMalloc {alloc_s * 1e3:.1f} ms, memset {fill_s * 1e3:.1f} ms "
        f"({ALLOC_BYTES / fill_s / 1e9:.0f} GB/s); free {free0 / _GIB:.1f} -> "
        f"{free1 / _GIB:.1f} of {total / _GIB:.1f} GiB"
    )
    if picked != [0xA5] * len(where) or lo != 0xA5 or hi != 0xA5:
        return {
            "status": DoctorStatus.FAIL,
            "detail": f"{facts}; wrong bytes: {picked}, min {lo} max {hi}",
        }
    return _ok(f"{facts}; every byte reads back 0xA5")


def _pinned_async() -> dict[str, str]:
    torch = _cuda_torch()
    n = PINNED_BYTES // 4
    src = torch.arange(n, dtype=torch.int32).pin_memory()
    back = torch.empty(n, dtype=torch.int32).pin_memory()
    if not (src.is_pinned() and back.is_pinned()):
        return {
            "status": DoctorStatus.FAIL,
            "detail": "pin_memory() returned unpinned host tensors",
        }
    stream = torch.cuda.Stream()
    if stream == torch.cuda.default_stream():
        return {"status": DoctorStatus.FAIL, "detail": "torch.cuda.Stream() is the default stream"}
    h2d_ms = d2h_ms = 0.0
    for _ in range(2):  # the first round warms up; the second is timed
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        back.zero_()
        with torch.cuda.stream(stream):
            dev = torch.empty(n, dtype=torch.int32, device="cuda")
            marks[0].record(stream)
            dev.copy_(src, non_blocking=True)
            marks[1].record(stream)
            back.copy_(dev, non_blocking=True)
            marks[2].record(stream)
        stream.synchronize()
        h2d_ms = float(marks[0].elapsed_time(marks[1]))
        d2h_ms = float(marks[1].elapsed_time(marks[2]))
    same = bool(torch.equal(src, back))
    facts = (
        f"{PINNED_BYTES >> 20} MiB pinned, on a non-default stream: H2D "
        f"{PINNED_BYTES / h2d_ms / 1e6:.1f} GB/s, D2H {PINNED_BYTES / d2h_ms / 1e6:.1f} GB/s"
    )
    if not same:
        return {"status": DoctorStatus.FAIL, "detail": f"{facts}; the copied-back contents differ"}
    return _ok(f"{facts}; contents match")


def _cublas() -> dict[str, str]:
    torch = _cuda_torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    start = time.monotonic()
    handle = int(torch.cuda.current_blas_handle())
    handle_s = time.monotonic() - start
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
    b = torch.randn(MATMUL_N, MATMUL_N, generator=gen)
    ref = a @ b
    da, db = a.cuda(), b.cuda()
    out = da @ db  # warm-up, and the result checked
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    rounds = 10
    marks[0].record()
    for _ in range(rounds):
        torch.mm(da, db)
    marks[1].record()
    torch.cuda.synchronize()
    ms = float(marks[0].elapsed_time(marks[1])) / rounds
    err = float((out.cpu() - ref).abs().max()) / float(ref.abs().max())
    facts = (
        f"cuBLAS handle {handle:#x} in {handle_s:.2f}s; {MATMUL_N}x{MATMUL_N} float32 matmul "
        f"{2 * MATMUL_N**3 / ms / 1e9:.0f} GFLOP/s; max error {err:.1e} of the CPU result's "
        f"largest value (tolerance {MATMUL_RTOL:g}, TF32 off)"
    )
    if handle == 0 or not err <= MATMUL_RTOL:
        return {"status": DoctorStatus.FAIL, "detail": facts}
    return _ok(facts)


def _nvml_values() -> dict[str, str]:
    _cuda_torch()  # same gate as the other checks: torch and a CUDA device
    via = nvml.binding()
    try:
        values = _read_nvml()
    except nvml.NvmlError as exc:
        return {
            "status": DoctorStatus.WARN,
            "detail": f"NVML unusable ({via}: {exc}): none of {', '.join(NVML_KEYS)} readable",
            "hint": "without NVML the stock 5.0 dashboard exits on missing util/gpu_percent",
        }
    parts = [f"{key} {value}" for key, value in values.items()]
    bad = [key for key, value in values.items() if value.startswith("unreadable")]
    detail = f"NVML device 0 via {via}: {'; '.join(parts)}"
    if bad:
        hint = "the 5.0 trainer ignores NVML return codes: these values may show as garbage"
        return {"status": DoctorStatus.WARN, "detail": detail, "hint": hint}
    return _ok(detail)


def _read_nvml() -> dict[str, str]:
    """Each value the 5.0 trainer reads from NVML device 0, or why it is unreadable; an
    NvmlError when NVML cannot be loaded, initialized, or give device 0's handle."""
    values: dict[str, str] = {}
    with nvml.open_nvml() as lib:
        handle = lib.handle(0)
        try:
            values[NVML_KEYS[0]] = f"readable ({lib.utilization(handle).gpu}%)"
        except nvml.NvmlError as exc:
            values[NVML_KEYS[0]] = f"unreadable ({exc})"
        try:
            mem = lib.memory(handle)
            values.update(_memory_values(mem.used, mem.total))
        except nvml.NvmlError as exc:
            values.update(dict.fromkeys(NVML_KEYS[1:], f"unreadable ({exc})"))
    return values


def _memory_values(used: int, total: int) -> dict[str, str]:
    return {
        NVML_KEYS[1]: f"readable ({used / _GIB:.2f})",
        NVML_KEYS[2]: f"readable ({total / _GIB:.2f})",
    }


_CHILD_CHECKS: dict[str, Callable[[], dict[str, str]]] = {
    "cuda-init": _cuda_init,
    "alloc-3gb": _alloc_3gb,
    "pinned-async": _pinned_async,
    "cublas": _cublas,
    "nvml-values": _nvml_values,
}
