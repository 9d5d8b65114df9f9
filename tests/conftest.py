"""Shared fixtures: the test programs, built once per session, and processes that are
always killed (whole process group) when a test ends, however it ends.

Also the suite's rules: a test that needs a tool setup.sh installs skips locally but fails
under CI when the tool is missing (`needs_tool` marker, `facts.require_tool`), and the
suite runs on four xdist workers (pyproject's addopts), longest modules first."""

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

import psutil
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


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # pyproject's addopts name xdist's options (-n 4 --dist loadfile --no-loadscope-reorder);
    # with xdist disabled (`-p no:xdist`) or not installed they are accepted and ignored, so
    # the suite runs serially
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist", "xdist absent: its options are accepted, ignored")
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=None)
    group.addoption("--dist", dest="dist", default="no")
    group.addoption("--no-loadscope-reorder", dest="loadscopereorder", action="store_false")


def pytest_configure(config: pytest.Config) -> None:
    """Let the suite's hundreds of harness subprocesses load bytecode instead of compiling.

    Some hosts (this project's CI machine among them) export PYTHONDONTWRITEBYTECODE=1: then
    no `__pycache__` is ever written and every `harness` subprocess recompiles its ~100
    modules, 0.6 s of CPU each time. The suite drops the variable for itself and its children
    (xdist workers inherit it: they start after this hook) and compiles the package once, in
    the controller, so that the workers do not race to write the same files."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        import compileall

        root = Path(__file__).resolve().parent.parent
        for package in ("harness", "tests"):
            compileall.compile_dir(root / package, quiet=1, workers=1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.needs_tool("gdb", why="...")`: skip locally, fail under CI, when missing."""
    for mark in item.iter_markers("needs_tool"):
        facts.require_tool(*mark.args, **mark.kwargs)


# how long a module takes, roughly, from its markers: an upstream trainer we build and run
# (minutes), a slow test (seconds to a minute), any other (a fraction of a second)
_WEIGHT = {"real": 100, "slow": 10}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first, so that on four workers (`--dist loadfile`: a module stays on
    one worker, sharing its module-scoped build cache) the last module to start is short.
    The order is the same on every worker (xdist requires it): a stable sort."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    weight: dict[str, int] = {}
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        w = max((v for k, v in _WEIGHT.items() if k in marks), default=1)
        weight[module(item)] = weight.get(module(item), 0) + w
    items.sort(key=lambda item: -weight[module(item)])


@pytest.fixture(autouse=True, scope="module")
def _reap_adopted_orphans() -> Iterator[None]:
    """Reap, after each module, the dead processes this test process adopted. A test that
    runs the runner in-process makes this process a subreaper (proctree) for the rest of
    the session, so orphans of later tests (Chromium's crashpad handler, a tool's helper)
    become our zombie children; without this they would show up in a later module's
    "nothing left behind" checks (test_doctor*) as that module's leak. A module's own
    checks run before its teardown, so its own leaks are still caught."""
    yield
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)


@pytest.fixture(scope="session")
def programs_dir() -> Path:
    return PROGRAMS


@pytest.fixture(scope="session")
def c_program(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`c_program("mutex_deadlock")` → path of the compiled binary (cached per session).

    The xdist workers of one session share the folder (their base temps are siblings):
    build.py compiles to a temporary name and renames it into place, so two workers that
    build the same program at once never run a half-written binary."""
    base = tmp_path_factory.getbasetemp()
    out_dir = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "programs"
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
    replica does not hang. Skips when the doctor's runtime detection says another runtime
    (a fact of the platform); when the probe cannot tell (no gcc -fopenmp, no ldd answer)
    that is a missing tool: a skip locally, a failure under CI."""
    runtime = facts.openmp_runtime()
    libgomp = facts.is_libgomp(runtime)
    if libgomp is None:
        facts.missing(
            f"an answer from the OpenMP runtime probe ({runtime})",
            "the stock replica hangs through libgomp's fork hazard; setup.sh installs gcc and "
            "libgomp1",
        )
    if not libgomp:
        found = facts.runtime_file(runtime)
        pytest.skip(
            f"needs GNU libgomp's fork hazard; gcc -fopenmp here gets {runtime}"
            + (f" (the file is {found.name})" if found else "")
        )
    return runtime


@pytest.fixture(scope="module")
def private_harness_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A harness build cache of the module's own, and no HARNESS_CHECKOUT from the caller:
    the modules that build generated histories (bisect, flaky bisect, triage's History)
    use it with `pytestmark = pytest.mark.usefixtures("private_harness_cache")`."""
    cache = tmp_path_factory.mktemp("harness-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_CACHE_DIR", str(cache))
        mp.delenv("HARNESS_CHECKOUT", raising=False)
        yield cache
