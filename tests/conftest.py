"""Shared fixtures: the test programs, built once per session, and processes that are
always killed (whole process group) when a test ends, however it ends.

Also the suite's rules: a test that needs a tool setup.sh installs skips locally but fails
under CI when the tool is missing (`needs_tool` marker, `facts.require_tool`), and the
suite runs on xdist workers (pyproject's addopts), longest work first."""

from __future__ import annotations

import contextlib
import importlib.util
import json
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
    # the replica's build.sh appends CFLAGS to its -O2 -g: at -O1 a build takes 1.4 CPU-s
    # instead of 2.4 and the trainer runs as fast (a million steps in 1.6 s either way);
    # the suite builds the replica dozens of times (bisect histories, variants). CFLAGS is
    # in the build key (the pin's env_passthrough): never mixed with the user's builds
    os.environ.setdefault("CFLAGS", "-O1")
    if not hasattr(config, "workerinput"):
        import compileall

        root = Path(__file__).resolve().parent.parent
        for package in ("harness", "tests"):
            compileall.compile_dir(root / package, quiet=1, workers=1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.needs_tool("gdb", why="...")`: skip locally, fail under CI, when missing."""
    for mark in item.iter_markers("needs_tool"):
        facts.require_tool(*mark.args, **mark.kwargs)


# a test's expected seconds when tests/durations.json does not know it (new or renamed),
# from its markers: an upstream trainer we build and run, a slow test, any other
_ESTIMATE_S = {"real": 60.0, "slow": 10.0}
_DEFAULT_S = 0.5


def _expected_s(item: pytest.Item, measured: dict[str, float]) -> float:
    if item.nodeid in measured:
        return measured[item.nodeid]
    marks = {m.name for m in item.iter_markers()}
    return max((v for k, v in _ESTIMATE_S.items() if k in marks), default=_DEFAULT_S)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook, on workers)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Work units for `--dist loadgroup`, longest first.

    A module marked `spread` is split test by test over the workers: its tests share no
    costly module fixture and do not depend on each other's order. Every other module is
    one unit (an xdist_group of its own: one worker, its module-scoped fixtures such as the
    build cache made once), as is any set of tests that names an `xdist_group` itself.
    Units go out longest first (tests/durations.json, measured; else estimated from the
    markers), so the last to start is short. The order is the same on every worker (xdist
    requires it): a stable sort."""
    try:
        measured: dict[str, float] = json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        measured = {}

    def unit(item: pytest.Item) -> str:
        group = item.get_closest_marker("xdist_group")
        if group is not None:
            return str(group.args[0] if group.args else group.kwargs.get("name", "default"))
        if item.get_closest_marker("spread") is not None:
            return item.nodeid
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(module))
        return module

    weight: dict[str, float] = {}
    units = {item.nodeid: unit(item) for item in items}
    for item in items:
        u = units[item.nodeid]
        weight[u] = weight.get(u, 0.0) + _expected_s(item, measured)
    items.sort(key=lambda item: -weight[units[item.nodeid]])


_DURATIONS = Path(__file__).resolve().parent / "durations.json"


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


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This session's temporary root, the same on every xdist worker (each worker's own
    base is a folder in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def cache_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The build cache of `harness` subprocesses: builds are real and never touch the user's
    cache, and one cache serves the whole session on every worker (the replica's variants
    are the same builds in every module: about 2 CPU-s each, built once instead of once per
    module). An entry is locked while it is built, so a second worker waits for that build
    and uses it. Tests that count their own builds or damage entries use a cache of their
    own (`private_harness_cache`, tmp_path)."""
    cache = session_root(tmp_path_factory) / "shared-build-cache"
    cache.mkdir(parents=True, exist_ok=True)
    return {"HARNESS_CACHE_DIR": str(cache)}


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
