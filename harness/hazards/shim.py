"""The two recorders of `--hazards` made ready for a run: the native shim (C, in
`data/hazards/hazards.c`) built by gcc on first use, and the Python start-up hook
(`data/hazards/python/sitecustomize.py`), both into the harness cache under a key of their
sources' sha256 (the hook is copied there: the Python processes of the run write its
bytecode beside it, never into the harness's own package); and the environment that loads
both into every process of the run (LD_PRELOAD, PYTHONPATH, HARNESS_HAZARDS_DIR)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harness import files
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.process.tools import find_tool, run_tool

SHIM_NAME = "libpuffer-hazards.so"
HOOK_NAME = "sitecustomize.py"
DIR_VAR = "HARNESS_HAZARDS_DIR"
COMPILE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Recorders:
    shim: Path  # the built shim
    hook_dir: Path  # the folder holding the Python hook's sitecustomize.py


def _data(name: str) -> Path:
    return Path(str(resources.files("harness").joinpath(f"data/hazards/{name}")))


def shim_source() -> Path:
    return _data("hazards.c")


def hook_source() -> Path:
    return _data(f"python/{HOOK_NAME}")


def _write_new(path: Path, data: bytes) -> None:
    """`data` into `path` through a name of this process's own, renamed into place when
    complete: two runs preparing at once never load half a file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def _compile(source: Path, target: Path) -> None:
    gcc = find_tool("gcc")
    if gcc is None:
        raise HarnessError("--hazards needs gcc to build its shim (./setup.sh installs it)", USAGE)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    argv = [gcc, "-O2", "-g", "-shared", "-fPIC", "-Wall", f"-Wl,-soname,{SHIM_NAME}"]
    argv += ["-o", str(partial), str(source), "-ldl", "-pthread"]
    res = run_tool(argv, timeout=COMPILE_TIMEOUT_S)
    if res.returncode != 0:
        partial.unlink(missing_ok=True)
        first = next((ln for ln in res.output.splitlines() if "error" in ln), res.output.strip())
        raise HarnessError(f"--hazards: the shim did not build: {first[:200]}", USAGE)
    os.replace(partial, target)


def recorders(cache: Path | None = None) -> Recorders:
    """The shim and the hook for these sources, in the cache (built now if not there yet).
    A missing gcc or a failed compile is a one-line usage error: --hazards cannot record."""
    source, hook = shim_source().read_bytes(), hook_source().read_bytes()
    key = hashlib.sha256(source + b"\0" + hook).hexdigest()[:16]
    folder = (cache or files.cache_home()) / "hazards" / key
    shim, hook_dir = folder / SHIM_NAME, folder / "python"
    try:
        hook_dir.mkdir(parents=True, exist_ok=True)
        if not (hook_dir / HOOK_NAME).is_file():
            _write_new(hook_dir / HOOK_NAME, hook)
    except OSError as exc:
        raise HarnessError(
            f"--hazards: cannot write {folder}: {files.write_failure(exc)}"
        ) from None
    if not shim.is_file():
        _compile(shim_source(), shim)
    return Recorders(shim, hook_dir)


def hazard_env(rec: Recorders, out_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The variables that load both recorders into the run, writing into `out_dir`: the shim
    first in LD_PRELOAD (before any the user set), the hook first on PYTHONPATH."""
    preload = " ".join(p for p in (str(rec.shim), base.get("LD_PRELOAD", "")) if p)
    pythonpath = os.pathsep.join(p for p in (str(rec.hook_dir), base.get("PYTHONPATH", "")) if p)
    return {"LD_PRELOAD": preload, "PYTHONPATH": pythonpath, DIR_VAR: str(out_dir.resolve())}
