"""What this host really has, probed the way the harness probes it, so that a test expects
what the platform says (a GPU host, LLVM's libomp) instead of assuming the CI container."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import NoReturn

import pytest

from harness.doctor.model import ProbeContext, tempdir
from harness.doctor.openmp import _FORK_SOURCE, _compile_omp, _omp_runtime
from harness.process.tools import find_tool


@cache
def openmp_runtime() -> str:
    """The doctor's own detection (harness.doctor.openmp): the runtime `ldd` resolves for a
    `gcc -fopenmp` binary, e.g. "runtime libgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1",
    or the reason it cannot tell ("gcc not found on PATH", "runtime unknown (...)")."""
    ctx = ProbeContext.make(30.0, None)
    with tempdir() as tmp:
        binary, reason = _compile_omp(_FORK_SOURCE, tmp, ctx)
        return _omp_runtime(binary, ctx) if binary is not None else reason


def runtime_file(runtime: str) -> Path | None:
    """The file behind the resolved runtime (links followed), None when the doctor could
    not tell: LLVM's libomp may be installed under the name libgomp.so.1."""
    m = re.match(r"runtime (\S+) => (\S+)", runtime)
    return Path(os.path.realpath(m.group(2))) if m else None


def is_libgomp(runtime: str) -> bool | None:
    """True for GNU libgomp (the runtime with the fork hazard), False for another runtime
    (LLVM libomp, Intel libiomp5, also when a libgomp.so.1 name links to one of them),
    None when the doctor could not tell."""
    found = runtime_file(runtime)
    return None if found is None else found.name.startswith("libgomp")


def nvml_loadable() -> bool:
    """libnvidia-ml can be loaded here (the driver's library, as the 5.0 trainer loads it)."""
    for name in ("libnvidia-ml.so.1", ctypes.util.find_library("nvidia-ml")):
        if name:
            try:
                ctypes.CDLL(name)
            except OSError:
                continue
            return True
    return False


def gpu_visible() -> bool:
    """An NVIDIA GPU is visible: a device node, or one listed by `nvidia-smi -L`."""
    if any(Path("/dev").glob("nvidia[0-9]*")):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.startswith("GPU ") for line in out.splitlines())


# ------------------------------------------------------------ what setup.sh installs

# Under CI (GitHub and .ci/run set CI=true) a test that needs a tool setup.sh installs fails
# when the tool is missing, instead of skipping: a green CI then means every test ran. Only
# what no setup can give (a GPU, NVML, another CPU architecture) stays a skip there.
SETUP_HINT = "./setup.sh installs what the suite needs; under CI=true a missing one fails"


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(what: str, why: str) -> NoReturn:
    """Skip locally, fail under CI: `what` (a tool setup.sh installs, root, ...) is missing
    for `why` (what the test needs it for)."""
    message = f"{what} is missing: {why}"
    if under_ci():
        pytest.fail(f"CI must run every test, but {message} ({SETUP_HINT})", pytrace=False)
    pytest.skip(message)


def require_tool(*names: str, why: str) -> str:
    """The path of the first of `names` the harness finds (on PATH; py-spy also in the
    venv's bin), or that setup.sh installed into the venv's bin (mpiexec, from the mpich
    wheel), a tool or its other names (chromium, chromium-browser); else missing."""
    for name in names:
        found = find_tool(name)
        beside = Path(sys.executable).parent / name
        if not found and os.access(beside, os.X_OK):
            found = str(beside)
        if found:
            return found
    missing(f"{' or '.join(names)} (not on PATH, nor in {Path(sys.executable).parent})", why)


def require_module(name: str, why: str) -> None:
    """The Python module `name` imports (torch, playwright ...); else missing."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing(f"the Python module {name} ({exc})", why)


def require_root(why: str) -> None:
    """This process runs as root (CI does); else missing."""
    if os.geteuid() != 0:
        missing(f"root (the tests run as uid {os.geteuid()})", why)
