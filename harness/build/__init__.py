"""Build a prepared source tree with the upstream's own build command, cached by inputs.

The cache key is sha256 over (the prepared tree's content — so the variant's changes are
in it —, the env, the build command and environment, the toolchain versions). A hit costs a
tree hash; a miss runs the build in the cache folder, keeps its log, and marks the build
complete only at the end so an interrupted build is never mistaken for a good one.

Concurrent harnesses (parallel test workers, a sweep next to a bisect) share the cache: one
build of a key at a time, under an exclusive flock on `<key folder>.lock` held from the
check for a finished build to the marker that declares one. The second process waits, then
finds the marker and reuses the build; a process that dies mid-build drops its lock (the
kernel releases a dead process's flocks) and leaves no marker, so the next one rebuilds.
The marker is written atomically: a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import BUILD_FAILED
from harness.process import tools

MARKER = ".harness-build.json"
IGNORED_NAMES = {".git", "logs", "checkpoints", "__pycache__", MARKER}

GENERIC_HINTS: tuple[tuple[str, str], ...] = (
    (r"ccache: (command )?not found", "install ccache (the upstream build.sh requires it)"),
    (r"nvcc: (command )?not found", "CUDA is not installed or not on PATH: set CUDA_HOME"),
    (r"nccl\.h: No such file", "NCCL headers are missing: install libnccl-dev"),
    (r"cublas.*: No such file|cannot find -lcublas", "cuBLAS is missing: install the CUDA toolkit"),
    (
        r"nvml\.h: No such file|cannot find -lnvidia-ml",
        "NVML is missing: install the NVIDIA driver dev files",
    ),
    (
        r"(Unsupported gpu architecture|-arch=native).*",
        "no GPU to detect for -arch=native: set NVCC_ARCH (e.g. sm_86)",
    ),
    (r"omp\.h: No such file", "OpenMP headers are missing: install libgomp (gcc) or libomp-dev"),
    (r"gcc: (command )?not found|cc: (command )?not found", "no C compiler: install gcc"),
)


def cache_root() -> Path:
    base = os.environ.get("HARNESS_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "puffer-harness"
    root.mkdir(parents=True, exist_ok=True)
    return root


@dataclass
class BuildResult:
    ok: bool
    tree: Path
    key: str
    cache_hit: bool
    duration_s: float
    log_path: Path
    command: str
    env: dict[str, str] = field(default_factory=dict)
    first_error: str = ""
    hint: str = ""
    toolchain: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["tree"] = str(self.tree)
        data["log_path"] = str(self.log_path)
        return data


def _walk(tree: Path) -> Iterator[Path]:
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if rel.parts and rel.parts[0] in IGNORED_NAMES:
            continue
        if path.is_file() and not path.is_symlink():
            yield path


def tree_hash(tree: Path, skip: frozenset[str] = frozenset()) -> str:
    digest = hashlib.sha256()
    for path in _walk(tree):
        rel = path.relative_to(tree).as_posix()
        if rel in skip:
            continue
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@cache
def tool_version(tool: str) -> str:
    if shutil.which(tool) is None:
        return "missing"
    res = tools.run_tool([tool, "--version"], timeout=20)
    text = [ln.strip() for ln in (res.stdout or res.stderr).splitlines() if ln.strip()]
    # nvcc's first line never changes ("nvcc: NVIDIA (R) Cuda compiler driver"): prefer the
    # line that carries the release/version number
    versioned = [ln for ln in text if re.search(r"release|version|\d+\.\d+", ln, re.I)]
    return (versioned or text or [f"exit {res.returncode}"])[0]


def copy_source(src: Path, dest: Path, skip: frozenset[str] = frozenset()) -> None:
    """Copy an in-repo source folder, leaving out build outputs and run artefacts."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(src)
        out = {n for n in names if n in IGNORED_NAMES}
        out |= {n for n in names if (rel / n).as_posix() in skip}
        return out

    shutil.copytree(src, dest, ignore=ignore, dirs_exist_ok=True, symlinks=True)


def new_scratch_tree() -> Path:
    scratch = cache_root() / "trees"
    scratch.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="prep-", dir=scratch))


def _first_error(log: str) -> str:
    """The line that explains a failed build: an error first, a missing file or tool next,
    else the last line (warnings such as nvcc's '-arch=native' notice are not the cause)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    generic = re.compile(r"ld returned|collect2|subprocess-exited-with-error|warning", re.I)
    for pattern in (
        r"\berror\b|\bfatal\b|not found|No such file|cannot find",  # a specific cause
        r"\berror\b",  # the linker's or pip's summary line
    ):
        for line in lines:
            if re.search(pattern, line, re.I) and (
                pattern == r"\berror\b" or not generic.search(line)
            ):
                return line[:300]
    return lines[-1][:300] if lines else ""


def _hint(log: str, pin: Pin) -> str:
    for h in pin.build_hints:
        if re.search(h.pattern, log):
            return h.hint
    for pattern, hint in GENERIC_HINTS:
        if re.search(pattern, log):
            return hint
    return ""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created, never removed: removing a lock file another
    process holds open would let a third lock a new file of the same name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_key(
    tree_digest: str, pin: Pin, env: str, build_env: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    toolchain = {t: tool_version(t) for t in pin.build_tools}
    # variables the upstream's build reads from the environment (NVCC_ARCH, CC, ...)
    passthrough = {k: os.environ.get(k) for k in sorted(pin.build_env_passthrough)}
    material = json.dumps(
        {
            "tree": tree_digest,
            "passthrough": passthrough,
            "env": env,
            "command": pin.render_build(env),
            "build_env": dict(sorted(build_env.items())),
            "toolchain": toolchain,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:24], toolchain


def build(prepared: Path, pin: Pin, env: str, extra_env: Mapping[str, str]) -> BuildResult:
    """Build `prepared` (a scratch tree this function takes ownership of) for `env`."""
    build_env = {**pin.build_env, **extra_env}
    env_part = env if pin.build_per_env else "all"
    key, toolchain = build_key(tree_hash(prepared), pin, env_part, build_env)
    final = cache_root() / "builds" / f"{pin.name}-{env_part}-{key}"
    command = pin.render_build(env)
    log_path = final.with_name(final.name + ".log")
    with _locked(final.with_name(final.name + ".lock")):
        marker = final / MARKER
        if marker.is_file():
            shutil.rmtree(prepared, ignore_errors=True)
            meta = json.loads(marker.read_text())
            return BuildResult(
                True,
                final,
                key,
                True,
                0.0,
                log_path,
                command,
                build_env,
                toolchain=toolchain,
                hint=f"built {meta.get('built_at', '?')}",
            )
        missing = [t for t in pin.build_tools if shutil.which(t) is None]
        if missing:
            shutil.rmtree(prepared, ignore_errors=True)
            raise HarnessError(
                f"build of {pin.name} needs {', '.join(missing)} on PATH "
                "(install them; ./setup.sh installs gcc, gdb, elfutils, git and ccache)",
                BUILD_FAILED,
            )
        shutil.rmtree(final, ignore_errors=True)
        prepared.rename(final)
        start = time.monotonic()
        res = tools.run_tool(
            ["bash", "-c", command],
            timeout=pin.build_timeout_s,
            cwd=final,
            env={**os.environ, **build_env},
            stdout_path=log_path,
        )
        duration = time.monotonic() - start
        log = log_path.read_text(errors="replace")
        missing_out = [o for o in pin.build_outputs if not (final / o).exists()]
        ok = res.returncode == 0 and not missing_out
        first = ""
        if res.timed_out:
            first = f"build timed out after {pin.build_timeout_s:g}s"
        elif res.error:
            first = f"cannot start the build: {res.error}"
        elif res.returncode != 0:
            first = _first_error(log) or f"build command exited {res.returncode}"
        elif missing_out:
            first = f"build succeeded but produced no {', '.join(missing_out)}"
        if ok:
            atomic_write(
                marker,
                json.dumps(
                    {
                        "key": key,
                        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "duration_s": duration,
                        "command": command,
                        "toolchain": toolchain,
                    }
                ),
            )
        return BuildResult(
            ok,
            final,
            key,
            False,
            duration,
            log_path,
            command,
            build_env,
            first_error=first,
            hint="" if ok else _hint(log, pin),
            toolchain=toolchain,
        )
