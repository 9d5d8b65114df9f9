"""The doctor's `gpu:*` probes (torch, the optional `gpu` extra). This machine has no GPU:
the skip paths run for real (CPU torch wheel; torch hidden), and the per-check child and
its timeout run against a stand-in torch that blocks the way a wedged driver does."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import doctor
from harness.doctor import torchgpu
from harness.doctor.model import ProbeContext, guarded
from tests import facts
from tests.harness_cli import living_descendants

pytestmark = [pytest.mark.timeout(120), pytest.mark.spread]

GPU_NAMES = [f"gpu:{check}" for check in torchgpu.CHECKS]
HAS_TORCH = importlib.util.find_spec("torch") is not None
TORCH_VERSION = importlib.metadata.version("torch") if HAS_TORCH else ""
# torch sees no device: no GPU here, or a CPU-only wheel (local version "+cpu")
NO_DEVICE = not facts.gpu_visible() or TORCH_VERSION.endswith("+cpu")

# a stand-in `torch` put first on the child's PYTHONPATH
HIDDEN = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'
# blocked for real in pipe_read: the process holds the write end and never writes
BLOCKED = "import os\n_r, _w = os.pipe()\nos.read(_r, 1)\n"
CRASHED = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"


def _fake_torch(folder: Path, body: str) -> ProbeContext:
    """A probe context whose children import `body` as torch."""
    (folder / "torch.py").write_text(body)
    path = os.environ.get("PATH", os.defpath)
    return ProbeContext(0.75, path, {**os.environ, "PATH": path, "PYTHONPATH": str(folder)})


def _run_gpu_probes(ctx: ProbeContext) -> dict[str, doctor.Probe]:
    return {p.name: p for p in (guarded(n, fn, ctx) for n, fn in torchgpu.probes())}


def test_gpu_probes_follow_the_cuda_probe() -> None:
    names = [name for name, _ in doctor._probes()]
    at = names.index("cuda")
    assert names[at + 1 : at + 1 + len(GPU_NAMES)] == GPU_NAMES
    assert names.index("nvml") < at


@pytest.mark.skipif(not NO_DEVICE, reason="torch sees a GPU here: see the GPU-host test")
def test_with_torch_and_no_device_every_gpu_probe_skips() -> None:
    facts.require_module("torch", "the doctor's GPU checks through torch (setup.sh installs it)")
    start = time.monotonic()
    probes = _run_gpu_probes(ProbeContext.make(10.0, None))
    assert list(probes) == GPU_NAMES
    for probe in probes.values():
        assert probe.status == "skip", probe
        assert f"torch {TORCH_VERSION}: no CUDA device" in probe.detail, probe
        assert "torch.cuda.is_available() is False" in probe.detail
    # one child (gpu:cuda-init) decides; the others start none
    assert all(probes[n].duration_s < 0.5 for n in GPU_NAMES[1:])
    assert time.monotonic() - start < 20
    assert living_descendants() == []


@pytest.mark.skipif(not NO_DEVICE, reason="torch sees a GPU here: see the GPU-host test")
@pytest.mark.parametrize("check", ["alloc-3gb", "nvml-values"])
def test_each_check_alone_skips_without_a_device(check: str) -> None:
    facts.require_module("torch", "the doctor's GPU checks through torch (setup.sh installs it)")
    # no gate: the child itself finds no device (every child runs the same gate)
    probe = torchgpu.run_check(check, ProbeContext.make(10.0, None))
    assert probe.status == "skip" and "no CUDA device" in probe.detail, probe


@pytest.mark.skipif(not HAS_TORCH or NO_DEVICE, reason="needs a GPU and a CUDA build of torch")
def test_on_a_gpu_host_every_check_passes() -> None:
    probes = _run_gpu_probes(ProbeContext.make(30.0, None))
    assert probes["gpu:cuda-init"].status == "ok", probes["gpu:cuda-init"]
    assert "device(s)" in probes["gpu:cuda-init"].detail
    for name in ("gpu:alloc-3gb", "gpu:pinned-async", "gpu:cublas"):
        assert probes[name].status == "ok", probes[name]
    assert "every byte reads back 0xA5" in probes["gpu:alloc-3gb"].detail
    assert "contents match" in probes["gpu:pinned-async"].detail
    assert "GFLOP/s" in probes["gpu:cublas"].detail
    assert "util/gpu_percent" in probes["gpu:nvml-values"].detail
    assert living_descendants() == []


def test_without_torch_the_doctor_says_so(tmp_path: Path) -> None:
    """The whole doctor, as a user runs it, in an interpreter where `import torch` fails."""
    (tmp_path / "torch.py").write_text(HIDDEN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run(
        [sys.executable, "-m", "harness", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    data = json.loads(res.stdout)
    probes = {p["name"]: p for p in data["probes"]}
    assert [n for n in probes if n.startswith("gpu:")] == GPU_NAMES
    for name in GPU_NAMES:
        assert probes[name]["status"] == "skip", probes[name]
        assert probes[name]["detail"] == torchgpu.NO_TORCH
    assert data["counts"]["skip"] >= len(GPU_NAMES)


@pytest.mark.parametrize("check", torchgpu.CHECKS)
def test_a_hanging_check_is_killed_at_its_limit(tmp_path: Path, check: str) -> None:
    ctx = _fake_torch(tmp_path, BLOCKED)
    limit = ctx.timeout_s * torchgpu.TIMEOUT_FACTOR
    start = time.monotonic()
    probe = torchgpu.run_check(check, ctx)
    elapsed = time.monotonic() - start
    assert probe.status == "fail", probe
    assert "timed out after" in probe.detail and f"limit {limit:g}s" in probe.detail
    assert limit <= elapsed < limit + 3.0
    assert probe.hint == torchgpu._WEDGED_HINT
    assert living_descendants() == []


def test_a_hanging_cuda_init_skips_the_device_checks(tmp_path: Path) -> None:
    ctx = _fake_torch(tmp_path, BLOCKED)
    limit = ctx.timeout_s * torchgpu.TIMEOUT_FACTOR
    start = time.monotonic()
    probes = _run_gpu_probes(ctx)
    init = probes["gpu:cuda-init"]
    assert init.status == "fail" and "timed out after" in init.detail
    for name in ("gpu:alloc-3gb", "gpu:pinned-async", "gpu:cublas"):
        assert probes[name].status == "skip"
        assert "needs gpu:cuda-init, which failed" in probes[name].detail
        assert probes[name].duration_s < 0.5
    # NVML may answer when CUDA does not: it gets its own child (which hangs here too)
    assert probes["gpu:nvml-values"].status == "fail"
    assert time.monotonic() - start < 2 * limit + 6.0
    assert living_descendants() == []


def test_a_crashing_child_is_a_failure_not_an_exception(tmp_path: Path) -> None:
    probe = torchgpu.run_check("cublas", _fake_torch(tmp_path, CRASHED))
    assert probe.status == "fail", probe
    assert "died without a verdict: exit -11" in probe.detail
    assert living_descendants() == []


def test_an_unknown_check_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown GPU check"):
        torchgpu.run_check("nope", ProbeContext.make(1.0, None))


def test_the_one_nvml_reader_follows_the_platform() -> None:
    """`nvml` and `gpu:nvml-values` read through doctor/nvml.py; here in a child, as they do."""
    code = "import json; from harness.doctor import gpu; print(json.dumps(gpu.read_device0()))"
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    data = json.loads(res.stdout.strip().splitlines()[-1])
    has_pynvml = importlib.util.find_spec("pynvml") is not None
    assert data["binding"] == ("pynvml" if has_pynvml else "ctypes")
    if not facts.nvml_loadable() and not has_pynvml:
        assert "libnvidia-ml" in data["absent"], data
    elif facts.gpu_visible():
        assert data["count"] >= 1 and 0 <= data["gpu"] <= 100 and 0 <= data["mem"] <= 100, data
    else:
        assert "error" in data or "absent" in data or data["count"] == 0, data
