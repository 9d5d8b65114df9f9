"""`pytest --hang-watch` inside sessions that are hostile to it (issue 29): tests that patch
what the plugin would call (tests/pytest_hang/case_hostile.py), a watcher killed or stopped
under the session, the plugin's own code found hung, a native hang after fifty passing
tests, and the plugins real suites run with it (pytest-asyncio, -randomly, -rerunfailures,
-forked, -timeout, -xdist). Each is a real inner pytest session; the outcome must be the one
without hang-watch, every result kept, and what the plugin says of itself said once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.pytest_plugin import channel
from tests.facts import missing, require_tool
from tests.test_pytest_plugin import Session, run_session

pytestmark = pytest.mark.spread

DEADLOCK = "case_hostile.py::test_deadlock_after_all_that"
NOT_WATCHED = "the tests after it were not watched"
# the plugins of the coexistence table (docs/pytest.md), pinned; fetched once into a cache
PLUGINS = [
    "pytest-asyncio==1.5.0",
    "pytest-randomly==5.1.0",
    "pytest-rerunfailures==16.7",
    "pytest-forked==1.7.5",
]


def _cause(message: str) -> str:
    """The failure's "top cause:" line (what an assertion shows when the cause is not the
    one expected)."""
    return next((ln for ln in message.splitlines() if "top cause:" in ln), message[:300])


def _outcomes(s: Session, leave_out: str = "") -> dict[str, str]:
    return {k: v[0] for k, v in s.junit.items() if k != leave_out}


@pytest.mark.slow
def test_hostile_tests_have_their_outcomes_and_a_hang_after_them_is_found(
    tmp_path: Path,
) -> None:
    """os.write returning 0, os.read returning b"", frozen clocks, a signal.signal that
    refuses, mock_open, patched select/socket/subprocess/threading/json, an empty
    environment, chdir, stdin closed, the test's own SIGUSR2 handler, SIGPIPE at its
    default, a fork, a thread left running: the same outcomes as without the plugin (the
    plugin of before spun for ever on the first), and the deadlock after them still fails
    with its verdict, alone and in an xdist worker."""
    plain = run_session(tmp_path / "plain", ["case_hostile.py"], "-k", "not deadlock", watch=False)
    assert plain.rc == 0, plain.out
    assert len(plain.junit) == 14 and set(_outcomes(plain).values()) == {"passed"}, plain.junit
    for name, extra in (("alone", ()), ("xdist", ("-n", "2"))):
        s = run_session(tmp_path / name, ["case_hostile.py"], "--hang-quiescent=2", *extra)
        assert s.rc == 1, (name, s.out)
        assert _outcomes(s, leave_out=DEADLOCK) == _outcomes(plain), (name, s.junit)
        outcome, message = s.junit[DEADLOCK]
        assert outcome == "failed" and "top cause: python-locks" in message, (name, _cause(message))
        assert NOT_WATCHED not in s.out and "== hang-watch ==" not in s.out, (name, s.out)
        assert s.leftover == [], (name, s.leftover)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_a_watcher_that_dies_or_stalls_is_said_once_and_the_session_goes_on(
    tmp_path: Path, sig: str
) -> None:
    """The watcher SIGKILLed (its socket ends) or SIGSTOPped (its beats stop: the plugin
    says so after 10 s of silence) by a test: every test keeps its result, the exit status
    is 0, the terminal summary says once that hang-watch stopped watching, and a stopped
    watcher is ended with the session (nothing left)."""
    s = run_session(
        tmp_path, ["case_watcher.py"], "--hang-quiescent=2", env_extra={"HANG_WATCHER_SIGNAL": sig}
    )
    assert s.rc == 0, s.out
    assert set(_outcomes(s).values()) == {"passed"} and len(s.junit) == 3, s.junit
    why = "ended or its socket was closed" if sig == "KILL" else "stopped answering"
    assert s.out.count(NOT_WATCHED) == 1 and why in s.out, s.out
    assert "== hang-watch ==" in s.out, s.out  # its own section of the summary
    assert s.leftover == [], s.leftover


@pytest.mark.slow
def test_the_plugins_own_hang_is_its_fault_not_the_tests(tmp_path: Path) -> None:
    """The plugin's own code deadlocks in a test's call (HANG_WATCH_FAULT: a lock taken
    twice in its phase hook, the one way left to hang it): the verdict finds the main thread
    in the plugin's frames; the test is not failed, hang-watch turns itself off saying it
    was its fault, and the session's results are those without it."""
    nodeid = "case_plain.py::test_plain_json"
    fault = {"HANG_WATCH_FAULT": f"phase-deadlock:{nodeid}"}
    s = run_session(tmp_path, ["case_plain.py"], "--hang-quiescent=2", env_extra=fault)
    assert s.rc == 0, s.out
    assert set(_outcomes(s).values()) == {"passed"} and len(s.junit) == 5, s.junit
    assert f"its own code hung in call of {nodeid}" in s.out, s.out
    assert "hang-watch's fault, not the test's" in s.out and s.out.count(NOT_WATCHED) == 1
    hang = channel.read_verdict(s.reports, nodeid, since=0)
    assert hang is not None and hang.answer == channel.OWN, hang
    assert s.leftover == []


@pytest.mark.slow
@pytest.mark.parametrize("gil", ["released", "held"])
def test_a_native_hang_after_fifty_tests_keeps_them_and_goes_on(tmp_path: Path, gil: str) -> None:
    """Fifty passing tests, then a deadlock in native code in pytest's own process that no
    signal interrupts (GIL released: the listener starts pytest again; GIL held: nothing
    of Python runs, the watcher does it through gdb), then three more tests: the fifty are
    in JUnit, the hung one fails with its cause, the three run. Never a SIGKILL."""
    require_tool("gcc", why="builds the C lock cycle the test calls")
    if gil == "held":
        require_tool("gdb", why="starts pytest again when its GIL is held")
    env = {"HANG_GIL": "1" if gil == "held" else "0"}
    s = run_session(tmp_path, ["case_fifty.py"], "--hang-quiescent=2", env_extra=env)
    assert s.rc == 1, s.out
    passing = [k for k, v in s.junit.items() if k.startswith("case_fifty.py::test_passing")]
    assert len(passing) == 50 and all(s.junit[k][0] == "passed" for k in passing), s.junit
    outcome, message = s.junit["case_fifty.py::test_native_deadlock_after_fifty"]
    assert outcome == "failed" and "top cause: lock-cycle" in message, (message, s.out)
    after = [k for k in s.junit if k.startswith("case_fifty.py::test_after_the_hang")]
    assert len(after) == 3 and all(s.junit[k][0] == "passed" for k in after), s.junit
    assert "1 failed, 53 passed" in s.out, s.out
    assert s.leftover == []


@pytest.fixture(scope="module")
def plugins_dir() -> Path:
    """The coexistence table's plugins, installed once (`pip install --target`, no
    dependencies: pytest and packaging come from this venv) into the real suites' cache."""
    from_env = os.environ.get("HARNESS_SUITES_CACHE")
    cache = Path(from_env) if from_env else Path.home() / ".cache/puffer-harness/real-suites"
    target = cache / ("plugins-" + "-".join(p.replace("==", "") for p in PLUGINS))
    if not (target / ".ready").exists():
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
        try:
            res = subprocess.run(
                [*cmd, str(target), *PLUGINS], capture_output=True, text=True, timeout=300
            )
        except subprocess.TimeoutExpired:
            missing("pytest plugins from PyPI (pip took over 300 s)", "the coexistence table")
        if res.returncode != 0:
            missing(f"pytest plugins from PyPI ({res.stderr[-300:]})", "the coexistence table")
        (target / ".ready").write_text("")
    return target


@pytest.mark.slow
def test_coexists_with_asyncio_randomly_rerunfailures_forked_timeout_and_xdist(
    tmp_path: Path, plugins_dir: Path
) -> None:
    """case_plugins.py under pytest-asyncio, pytest-randomly (a shuffled order),
    pytest-rerunfailures (a test that fails once), pytest-forked (a test in a forked child),
    pytest-timeout (thread method) all at once: the outcomes without hang-watch, with it,
    and with it on two xdist workers are the same, and the deadlock among them fails with
    its verdict under each."""
    path = os.pathsep.join(p for p in (str(plugins_dir), os.environ.get("PYTHONPATH")) if p)
    common = ["--timeout=120", "--timeout-method=thread"]
    runs = {}
    for name, watch, extra in (
        ("plain", False, ["-k", "not deadlock"]),
        ("watch", True, ["--hang-quiescent=2"]),
        ("xdist", True, ["--hang-quiescent=2", "-n", "2"]),
    ):
        flaky = tmp_path / f"{name}-flaky"
        flaky.mkdir(parents=True)
        env = {"PYTHONPATH": path, "HANG_FLAKY_DIR": str(flaky)}
        s = run_session(
            tmp_path / name, ["case_plugins.py"], *common, *extra, watch=watch, env_extra=env
        )
        runs[name] = s
        for plugin in ("asyncio-1.5.0", "randomly-5.1.0", "rerunfailures-16.7", "forked-1.7.5"):
            assert plugin in s.out, (name, plugin, s.out)  # each was really loaded
        assert "1 rerun" in s.out, (name, s.out)
    plain = runs["plain"]
    assert plain.rc == 0 and set(_outcomes(plain).values()) == {"passed"}, plain.out
    deadlock = "case_plugins.py::test_python_deadlock"
    for name in ("watch", "xdist"):
        s = runs[name]
        assert s.rc == 1, (name, s.out)
        assert _outcomes(s, leave_out=deadlock) == _outcomes(plain), (name, s.junit)
        outcome, message = s.junit[deadlock]
        assert outcome == "failed" and "top cause: python-locks" in message, (name, _cause(message))
        assert NOT_WATCHED not in s.out, (name, s.out)
        assert s.leftover == [], (name, s.leftover)
