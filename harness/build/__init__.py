"""Build a prepared source tree with the upstream's own build command, cached by inputs.

The cache key is sha256 over (the prepared tree's content — so the variant's changes are
in it —, the env, the build command and environment, the toolchain versions). A miss runs
the build in the cache folder, keeps its log, and marks the build complete only at the end
so an interrupted build is never mistaken for a good one. The build command runs under the
reaper, like the trainer (`tools.run_tool(..., reaped=True)`): nothing it starts outlives
the harness, even a SIGKILLed one.

The cache checks itself. The marker records what the build produced: size and sha256 of
each declared output and of each config file the run reads (`pin.config_files`, for every
env), and the size of every other file of the built tree. A hit costs a tree hash of the
prepared tree plus a check of the entry: sizes of every recorded file (a stat each), then
the hashes of the outputs and config files (a few ms on the replica). An entry that fails
it — a truncated or deleted binary, a deleted config folder, a truncated, garbled or
foreign marker — is set aside and rebuilt (a build that never finished is deleted), and
`BuildResult.notes` says why (for the report). Declared outputs must lie inside the build
tree: an absolute path, a `..` escape or a link out of it is refused, never hashed.

Concurrent harnesses (parallel test workers, a sweep next to a bisect) share the cache: one
build of a key at a time, under an exclusive flock on `<key folder>.lock` held from the
check for a finished build to the marker that declares one. The second process waits, then
finds the marker and reuses the build; a process that dies mid-build drops its lock (the
kernel releases a dead process's flocks) and leaves no marker, so the next one rebuilds.
The marker is written atomically: a reader never sees half of one.
"""

from __future__ import annotations

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

from harness import files
from harness.build.entry import (
    IGNORED_NAMES,
    MARKER,
    MARKER_FORMAT,
    check_entry,
    locked,
    record,
    set_aside,
)
from harness.config.pin import Pin
from harness.contain import confined, is_inside
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import BUILD_FAILED
from harness.process import tools

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
    root = files.cache_home()
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
    # what the caller should tell the reader: a damaged cache entry removed and rebuilt
    notes: list[str] = field(default_factory=list)

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
    try:  # before anything is built: outputs must lie inside the build copy
        for out in pin.build_outputs:
            confined(prepared, out, what=f"{pin.file}: build.outputs")
    except HarnessError:
        shutil.rmtree(prepared, ignore_errors=True)
        raise
    build_env = {**pin.build_env, **extra_env}
    env_part = env if pin.build_per_env else "all"
    key, toolchain = build_key(tree_hash(prepared), pin, env_part, build_env)
    # the pin's and env's names are data: a name with "/" or ".." must not leave the cache
    entry_name = f"{pin.name}-{env_part}-{key}"
    if "/" in entry_name or entry_name.startswith("."):
        shutil.rmtree(prepared, ignore_errors=True)
        raise HarnessError(f"{pin.file}: pin and env names must be plain names: {entry_name!r}")
    builds = cache_root() / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    final = confined(builds, entry_name, what=f"{pin.file}: name")
    command = pin.render_build(env)
    log_path = final.with_name(final.name + ".log")
    notes: list[str] = []
    with locked(final.with_name(final.name + ".lock")):
        marker = final / MARKER
        # an entry without a marker is a build that failed or never finished: no run ever
        # used it, so it is deleted and rebuilt without a note; one with a marker was used
        finished = marker.exists() or marker.is_symlink()
        if finished:
            entry = check_entry(final, key, pin)
            if not isinstance(entry, str):
                shutil.rmtree(prepared, ignore_errors=True)
                hint = f"built {entry.built_at}"
                return BuildResult(
                    True, final, key, True, 0.0, log_path, command, build_env, hint=hint,
                    toolchain=toolchain,
                )  # fmt: skip
            notes.append(f"build cache entry {final.name} failed its check: {entry}; rebuilt")
        missing = [t for t in pin.build_tools if shutil.which(t) is None]
        if missing:
            shutil.rmtree(prepared, ignore_errors=True)
            raise HarnessError(
                f"build of {pin.name} needs {', '.join(missing)} on PATH "
                "(install them; ./setup.sh installs gcc, gdb, elfutils, git and ccache)",
                BUILD_FAILED,
            )
        set_aside(final, may_be_in_use=finished)
        prepared.rename(final)
        start = time.monotonic()
        res = tools.run_tool(
            ["bash", "-c", command],
            timeout=pin.build_timeout_s,
            cwd=final,
            env={**os.environ, **build_env},
            stdout_path=log_path,
            reaped=True,  # the build's tree dies with the harness, even a SIGKILLed one
        )
        duration = time.monotonic() - start
        log = log_path.read_text(errors="replace")
        missing_out = [o for o in pin.build_outputs if not (final / o).exists()]
        linked_out = [
            o for o in pin.build_outputs if o not in missing_out and not is_inside(final, o)
        ]
        first = ""
        if res.timed_out:
            first = f"build timed out after {pin.build_timeout_s:g}s"
        elif res.error:
            first = f"cannot start the build: {res.error}"
        elif res.returncode != 0:
            first = _first_error(log) or f"build command exited {res.returncode}"
        elif missing_out:
            first = f"build succeeded but produced no {', '.join(missing_out)}"
        elif linked_out:
            first = f"build output {linked_out[0]} is a link out of the build tree"
        if not first:
            try:
                files = record(final, pin)
            except (OSError, HarnessError) as exc:
                first = f"cannot record the build's files: {exc}"
        if not first:
            atomic_write(
                marker,
                json.dumps(
                    {
                        "format": MARKER_FORMAT,
                        "key": key,
                        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "duration_s": duration,
                        "command": command,
                        "toolchain": toolchain,
                        **files,
                    }
                ),
            )
        return BuildResult(
            not first, final, key, False, duration, log_path, command, build_env,
            first_error=first, hint=_hint(log, pin) if first else "", toolchain=toolchain,
            notes=notes,
        )  # fmt: skip
