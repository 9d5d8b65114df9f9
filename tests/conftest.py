"""Shared fixtures: the test programs, built once per session, and processes that are
always killed (whole process group) when a test ends, however it ends."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests import facts

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _load_build() -> ModuleType:
    # tests/programs is not a package; load its build helper by path
    spec = importlib.util.spec_from_file_location("tests_programs_build", PROGRAMS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_build = _load_build()


@pytest.fixture(scope="session")
def programs_dir() -> Path:
    return PROGRAMS


@pytest.fixture(scope="session")
def c_program(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`c_program("mutex_deadlock")` → path of the compiled binary (cached per session)."""
    out_dir = tmp_path_factory.mktemp("programs")
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            built[name] = _build.compile_c(name, out_dir)
        return built[name]

    return build


class Spawned:
    """A process started in its own session, with its stdout (and stderr) on a pipe."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.output = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, text: str, timeout: float = 10.0, count: int = 1) -> None:
        """Read output until `text` has appeared (`count` times); fail on exit or timeout."""
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while self.output.count(text.encode()) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {text!r} from pid {self.pid} in {timeout}s: {self.output!r}")
            ready, _, _ = select.select([fd], [], [], left)
            chunk = os.read(fd, 65536) if ready else b""
            if ready and not chunk:
                pytest.fail(f"pid {self.pid} closed output before {text!r}: {self.output!r}")
            self.output += chunk

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Spawned]]:
    """`spawn(argv, env=...)` → Spawned; every process group is SIGKILLed at teardown."""
    started: list[Spawned] = []

    def start(argv: list[str | Path], **kwargs: object) -> Spawned:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,  # type: ignore[call-overload]
        )
        started.append(Spawned(proc))
        return started[-1]

    try:
        yield start
    finally:
        # kill every group before waiting on any: a traced child is reaped only once
        # its tracer (maybe another spawned process) is gone
        for s in started:
            s.kill()
        for s in started:
            s.reap()


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A per-module build cache for `harness` subprocesses: builds are real, shared by the
    tests of one module, and never touch the user's cache."""
    return {"HARNESS_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="session")
def libgomp_fork_hazard() -> str:
    """The stock replica hangs for real through the libgomp fork hazard (an OpenMP team in
    the parent, then fork()); LLVM's libomp resets itself after fork, so there the stock
    replica does not hang. Skips unless the doctor's runtime detection says libgomp."""
    runtime = facts.openmp_runtime()
    if not facts.is_libgomp(runtime):
        found = facts.runtime_file(runtime)
        pytest.skip(
            f"needs GNU libgomp's fork hazard; gcc -fopenmp here gets {runtime}"
            + (f" (the file is {found.name})" if found else "")
        )
    return runtime
