"""`pytest --hang-watch` (harness/pytest_plugin): real pytest sessions over the sample tests
of tests/pytest_hang/ (copied to a temporary folder with their own pytest.ini), each under a
timeout: a native deadlock (ctypes into a C lock cycle), a Python deadlock and a stuck child
fail with their causes, every other test passes and is reported, JUnit lists them all,
nothing is left running; the same with xdist; healthy look-alikes pass."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from harness.pytest_plugin import channel, procstart, resume, watcher
from harness.pytest_plugin.watcher import look_every
from harness.report.load import load_report
from harness.vocab import RunMode, Trigger
from tests.facts import require_tool
from tests.harness_cli import verdict_of

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

CASES = Path(__file__).parent / "pytest_hang"
SESSION_S = 60  # each inner session must end well within this
QUIESCENT_S = 3.0
NATIVE = "case_native.py::test_native_deadlock"
PYLOCKS = "case_pylocks.py::test_python_deadlock"
CHILD = "case_child.py::test_stuck_child"
HANG_FILES = ["case_native.py", "case_pylocks.py", "case_child.py", "case_plain.py"]
EXPECTED_CAUSE = {NATIVE: "lock-cycle", PYLOCKS: "python-locks", CHILD: "python-locks"}


def _plugin_args() -> list[str]:
    """`-p` only while the package's pytest11 entry point is not installed (both would
    register the module twice)."""
    eps = metadata.entry_points(group="pytest11")
    if any(ep.value == "harness.pytest_plugin.plugin" for ep in eps):
        return []
    return ["-p", "harness.pytest_plugin.plugin"]


@dataclass
class Session:
    rc: int
    out: str
    elapsed: float
    junit: dict[str, tuple[str, str]]  # nodeid → (outcome, failure message)
    reports: Path
    leftover: list[int]


def _marked(marker: str) -> list[int]:
    """Processes whose environment carries the session's marker (its whole tree, the
    watchers too: they inherit pytest's environment)."""
    needle = f"HANG_WATCH_TEST_MARK={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _junit(path: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    if not path.exists():  # a session that was killed writes none
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/") + ".py"
        nodeid = f"{module}::{case.get('name')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            # a line between them: the message may end in the report's path (pytest 9.1)
            out[nodeid] = ("failed", f"{failure.get('message') or ''}\n{failure.text or ''}")
        elif case.find("skipped") is not None:
            out[nodeid] = ("skipped", "")
        else:
            out[nodeid] = ("passed", "")
    return out


def run_session(
    tmp_path: Path,
    files: list[str],
    *extra: str,
    watch: bool = True,
    env_extra: dict[str, str] | None = None,
) -> Session:
    """One inner session over copies of tests/pytest_hang (`watch`: with --hang-watch)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cases = tmp_path / "cases"
    shutil.copytree(CASES, cases)
    (cases / "pytest.ini").write_text("[pytest]\npython_files = case_*.py\n")
    lib = cases / "liblock_cycle.so"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O0",
            "-o",
            str(lib),
            str(cases / "lock_cycle.c"),
            "-lpthread",
        ],
        check=True,
        timeout=60,
    )
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(HANG_LIB=str(lib), HANG_WATCH_TEST_MARK=marker, **(env_extra or {}))
    reports = tmp_path / "reports"
    junit = tmp_path / "junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *_plugin_args(),
        "-p",
        "no:cacheprovider",
        *(["--hang-watch"] if watch else []),
        f"--hang-report-dir={reports}",
        f"--junitxml={junit}",
        *extra,
        *files,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=cases, env=env, capture_output=True, text=True, timeout=SESSION_S
    )
    elapsed = time.monotonic() - t0
    leftover = _marked(marker)
    end = time.monotonic() + 5.0  # a watcher ends within a look of pytest's exit
    while leftover and time.monotonic() < end:
        time.sleep(0.1)
        leftover = _marked(marker)
    return Session(
        proc.returncode, proc.stdout + proc.stderr, elapsed, _junit(junit), reports, leftover
    )


def _check_hangs(s: Session) -> None:
    assert s.rc == 1, s.out
    assert len(s.junit) == 14, s.junit  # every test, once
    for nodeid, cause in EXPECTED_CAUSE.items():
        outcome, message = s.junit[nodeid]
        assert outcome == "failed", (nodeid, s.out)
        assert "hang-watch:" in message and f"top cause: {cause}" in message, (nodeid, message)
        # within the quiescence window plus one look of the watcher and the test's own start
        # (3.3-3.4 s alone; up to 4.6 s beside the whole suite and two busy loops on 2
        # cores): far below the session timeout that would end it otherwise
        after = re.search(r"quiescent (\d+\.\d)s into call", message)
        bound = QUIESCENT_S + look_every(QUIESCENT_S) + 2.5
        assert after is not None and float(after.group(1)) < bound, message
        # xdist quotes a crashed worker's longrepr in the message: `failed on setup with "…"`
        path = re.search(r'report: ([^\s"]+)', message)
        assert path is not None, message
        report = load_report(Path(path.group(1)))
        assert report.mode is RunMode.PYTEST
        assert [c.id for c in verdict_of(report).causes][:1] == [cause]
        assert nodeid in s.out  # the terminal names it too
    passed = [n for n, (o, _) in s.junit.items() if o == "passed"]
    assert sorted(passed) == sorted(set(s.junit) - set(EXPECTED_CAUSE)), s.junit
    assert len(passed) == 11
    assert "3 failed, 11 passed" in s.out, s.out
    assert s.leftover == [], s.leftover
    assert s.elapsed < SESSION_S


@pytest.mark.slow
def test_three_hangs_fail_alone_and_the_session_goes_on(tmp_path: Path) -> None:
    require_tool("gcc", why="builds the C lock cycle the native test calls")
    s = run_session(tmp_path, HANG_FILES, f"--hang-quiescent={QUIESCENT_S}")
    _check_hangs(s)
    # the native hang could not be interrupted: pytest started again and replayed
    assert "starts again in this process" in s.out
    assert f"resumed after {NATIVE} hung in native code" in s.out
    assert not list((s.reports / channel.HIDDEN_DIR).glob("resume-*.json"))  # consumed
    print(f"session {s.elapsed:.1f}s")


@pytest.mark.slow
def test_three_hangs_with_xdist(tmp_path: Path) -> None:
    require_tool("gcc", why="builds the C lock cycle the native test calls")
    s = run_session(tmp_path, HANG_FILES, f"--hang-quiescent={QUIESCENT_S}", "-n", "2")
    _check_hangs(s)
    # the worker stuck in native code ended itself; the controller's report says why
    assert f"crashed while running '{NATIVE}'" in s.junit[NATIVE][1]
    print(f"session {s.elapsed:.1f}s")


@pytest.mark.slow
def test_gil_held_hang_starts_pytest_again_through_gdb(tmp_path: Path) -> None:
    """A native deadlock that keeps the GIL: nothing of Python runs in pytest, no answer
    comes; the watcher appends the verdict to the session's journal and makes pytest's
    main thread exec through gdb (same pid): the test before it is replayed, the hung one
    fails with its cause, the one after it runs. Never a SIGKILL of pytest."""
    require_tool("gcc", why="builds the C lock cycle the test calls")
    require_tool("gdb", why="starts pytest again when its GIL is held")
    s = run_session(tmp_path, ["case_gil.py"], "--hang-quiescent=2")
    assert s.rc == 1, s.out
    gil = "case_gil.py::test_gil_held_deadlock"
    hang = channel.read_verdict(s.reports, gil, since=0)
    assert hang is not None and hang.answer == channel.EXEC_TRACED, hang
    assert hang.cause_id == "lock-cycle"
    assert load_report(Path(hang.report)).mode is RunMode.PYTEST
    assert "(the GIL held: through gdb)" in s.out, s.out
    outcome, message = s.junit[gil]
    assert outcome == "failed" and "top cause: lock-cycle" in message, message
    assert s.junit["case_gil.py::test_gil_before"][0] == "passed", s.junit
    assert s.junit["case_gil.py::test_gil_after"][0] == "passed", s.junit
    assert "1 failed, 2 passed" in s.out, s.out
    assert s.leftover == []


@pytest.mark.slow
def test_a_subreaper_pytest_adopts_its_watcher_and_still_gets_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest as a child subreaper (tests/pytest_hang/conftest.py): the watcher's launcher
    exits and pytest adopts the watcher, so it sits in the tree it watches. It must leave
    itself out of the rule and of every kill: the stuck child is killed once the test is
    interrupted, and after the native hang (pytest's every descendant is killed before it
    starts again) the watcher is still there to record its answer; nothing is left."""
    require_tool("gcc", why="builds the C lock cycle the native test calls")
    monkeypatch.setenv("HANG_SUBREAPER", "1")
    s = run_session(
        tmp_path, ["case_child.py", "case_native.py", "case_plain.py"], "--hang-quiescent=2"
    )
    assert s.rc == 1, s.out
    for nodeid, answer in ((CHILD, channel.INTERRUPTED), (NATIVE, channel.EXEC)):
        outcome, message = s.junit[nodeid]
        assert outcome == "failed" and "hang-watch:" in message, (nodeid, message, s.out)
        hang = channel.read_verdict(s.reports, nodeid, since=0)
        # the answer is written after the kills: a watcher that killed itself leaves ""
        assert hang is not None and hang.answer == answer, (nodeid, hang)
    assert "2 failed, 9 passed" in s.out, s.out
    assert s.leftover == [] or all(_gone(p) for p in s.leftover), s.leftover


@pytest.mark.slow
def test_a_healthy_executor_left_running_ends_as_usual(tmp_path: Path) -> None:
    """An executor never shut down (non-daemon workers) in a session without a hang:
    Python's exit ends it; the plugin neither waits nor cuts the exit short (atexit runs)."""
    s = run_session(tmp_path, ["case_pool.py"], "--hang-quiescent=2")
    assert s.rc == 0, s.out
    assert "case_pool: atexit ran" in s.out, s.out
    assert "without waiting" not in s.out, s.out
    assert s.leftover == []


@pytest.mark.slow
def test_timeout_fails_a_spin_once_and_the_session_goes_on(tmp_path: Path) -> None:
    """A test busy in Python is never quiescent: --hang-timeout fails it, with one report
    (its teardown is the same test: no second verdict), and the next test runs."""
    s = run_session(tmp_path, ["case_spin.py"], "--hang-quiescent=2", "--hang-timeout=3")
    assert s.rc == 1, s.out
    outcome, message = s.junit["case_spin.py::test_spin"]
    assert outcome == "failed" and "(--hang-timeout)" in message, (message, s.out)
    assert "spin" in message, message
    assert s.junit["case_spin.py::test_spin_after"][0] == "passed", s.junit
    folders = [p for p in s.reports.iterdir() if p.name != channel.HIDDEN_DIR]
    assert len(folders) == 1, folders
    assert s.leftover == []


@pytest.mark.slow
def test_a_swallowed_interrupt_is_given_again(tmp_path: Path) -> None:
    """`with ThreadPoolExecutor() as ex: ex.submit(deadlock).result()`: the first interrupt
    ends result(), then __exit__ joins the deadlocked worker and the test is quiescent
    again; a second interrupt ends that too (no restart of pytest) and the next test
    runs."""
    s = run_session(tmp_path, ["case_executor.py"], "--hang-quiescent=2")
    assert s.rc == 1, s.out
    outcome, message = s.junit["case_executor.py::test_executor_deadlock"]
    assert outcome == "failed" and "hang-watch:" in message, (message, s.out)
    assert s.junit["case_executor.py::test_executor_after"][0] == "passed", s.junit
    assert "starts again in this process" not in s.out, s.out
    # two verdicts, two reports: the one swallowed, the one that ended the test
    folders = [p for p in s.reports.iterdir() if "test_executor_de" in p.name]
    assert len(folders) == 2, (folders, message)
    assert s.leftover == []


@pytest.mark.slow
def test_faulthandler_timeout_watchdog_is_not_the_test(tmp_path: Path) -> None:
    """pytest's faulthandler_timeout starts a new C watchdog thread (a timed wait) for each
    test; the deadlock in the second test is still quiescent, not a --hang-timeout."""
    s = run_session(
        tmp_path,
        ["case_pylocks.py"],
        "--hang-quiescent=2",
        "--hang-timeout=20",
        "-o",
        "faulthandler_timeout=60",
    )
    assert s.rc == 1, s.out
    outcome, message = s.junit[PYLOCKS]
    assert outcome == "failed" and "quiescent" in message, (message, s.out)
    assert "top cause: python-locks" in message, message


@pytest.mark.slow
def test_resume_after_a_moved_hang_past_a_double_dash(tmp_path: Path) -> None:
    """The native hang's test left the cwd and the environment changed and a Path in a
    user property, and the files follow `--`: the session is saved anyway, pytest starts
    again from where it was started with its environment, and the command line still
    names only files after `--`."""
    require_tool("gcc", why="builds the C lock cycle the test calls")
    s = run_session(tmp_path, ["--", "case_resume.py"], "--hang-quiescent=2")
    assert s.rc == 1, s.out
    assert "resumed after case_resume.py::test_moved_then_native_deadlock" in s.out, s.out
    assert s.junit["case_resume.py::test_property_path"][0] == "passed", s.junit
    outcome, message = s.junit["case_resume.py::test_moved_then_native_deadlock"]
    assert outcome == "failed" and "top cause: lock-cycle" in message, (message, s.out)
    assert s.junit["case_resume.py::test_resumed_where_it_started"][0] == "passed", s.out
    assert s.leftover == []


@pytest.mark.slow
def test_healthy_look_alikes_pass(tmp_path: Path) -> None:
    """A long sleep and a wait on a slow child are not quiescent: never a trigger."""
    s = run_session(tmp_path, ["case_healthy.py"], "--hang-quiescent=2")
    assert s.rc == 0, s.out
    assert [o for o, _ in s.junit.values()] == ["passed"] * 3
    assert not [p for p in s.reports.iterdir() if p.name != channel.HIDDEN_DIR]
    assert s.leftover == []


@pytest.mark.slow
def test_pytest_timeout_signal_method_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-timeout's SIGALRM handler makes every wait of the process timed (a timer
    signal may end it), so the tree is never quiescent: pytest-timeout fires at --timeout;
    hang-watch would only at --hang-timeout (docs/pytest.md). The test's threads are
    daemons here: hang-watch failed nothing, so it does not end the process, and Python's
    exit would join deadlocked non-daemon threads for ever, as without the plugin."""
    monkeypatch.setenv("HANG_DAEMON", "1")
    s = run_session(tmp_path, ["case_pylocks.py"], "--hang-quiescent=2", "--timeout=8")
    assert s.rc == 1
    outcome, message = s.junit[PYLOCKS]
    assert outcome == "failed" and "Timeout" in message and "hang-watch:" not in message
    assert s.leftover == [] or all(_gone(p) for p in s.leftover)


@pytest.mark.slow
def test_pytest_timeout_thread_method_yields_to_quiescence(tmp_path: Path) -> None:
    """pytest-timeout's thread method waits in a Timer thread, which the plugin leaves out
    of the rule (it is the watchdog): the quiescence verdict comes first, the session goes
    on and ends (the interrupted test's deadlocked threads are not waited for)."""
    s = run_session(
        tmp_path,
        ["case_pylocks.py"],
        "--hang-quiescent=2",
        "--timeout=30",
        "--timeout-method=thread",
    )
    assert s.rc == 1, s.out
    outcome, message = s.junit[PYLOCKS]
    assert outcome == "failed" and "top cause: python-locks" in message, message
    assert "2 passed" in s.out and s.elapsed < 30
    assert "pytest ends without waiting for them" in s.out
    assert s.leftover == []


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] == "Z"
    except OSError:
        return True


def test_inert_without_the_flag(tmp_path: Path) -> None:
    """Without --hang-watch: no watcher, no report folder, the tests as usual."""
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SESSION_S,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hang-watch" not in out.stdout
    assert not (tmp_path / "harness-reports").exists()


def test_report_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    (tmp_path / "taken").write_text("a file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", *_plugin_args(), "-p", "no:cacheprovider"),
            *("--hang-watch", "--hang-report-dir=taken"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SESSION_S,
    )
    assert out.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--hang-report-dir" in out.stderr and "Traceback" not in out.stderr


def test_verdict_file_is_found_for_its_test_only_when_fresh(tmp_path: Path) -> None:
    hang = channel.Hang(
        seq=3,
        nodeid="a/test_x.py::test_y[param with / and ::]",
        when="call",
        trigger=Trigger.QUIESCENT,
        after_s=5.2,
        kind="hang",
        summary="hang (deadlock) in f",
        cause_id="lock-cycle",
        cause_title="lock-order deadlock",
        report=str(tmp_path / "r1"),
        time=time.time(),
    )
    (tmp_path / "r1").mkdir()
    channel.write_verdict(tmp_path, hang)
    found = channel.read_verdict(tmp_path, hang.nodeid, since=hang.time - 1)
    assert found == hang
    assert "top cause: lock-cycle: lock-order deadlock" in found.message
    assert channel.read_verdict(tmp_path, hang.nodeid, since=hang.time + 1) is None
    assert channel.read_verdict(tmp_path, "a/test_x.py::other", since=0) is None
    assert json.loads((tmp_path / "r1" / "hang.json").read_text())["nodeid"] == hang.nodeid


def test_resume_state_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    """A journal of the wrong shape (hand-edited, another version) is a usage error, not an
    INTERNALERROR."""
    for text in ('{"reports": 5}', "[1]", "{not json", ""):
        path = tmp_path / "state.json"
        path.write_text(text)
        with pytest.raises(pytest.UsageError, match=resume.ENV):
            resume.load(path)


def test_journal_keeps_reports_and_the_hang_and_drops_a_cut_line(tmp_path: Path) -> None:
    """What the resumed session reads: every report in order (a Path property as its
    text), the verdict, and not the last line a kill cut short."""
    config = pytest.Config.fromdictargs({}, [])
    report = pytest.TestReport(
        "t.py::x", ("t.py", 1, "x"), {}, "passed", None, "call", user_properties=[("p", Path("/x"))]
    )
    journal = resume.Journal(tmp_path / "j.jsonl")
    journal.add(config, report)
    hang = channel.Hang(
        3, "t.py::y", "call", Trigger.QUIESCENT, 2.0, "hang", "s", "c", "t", "r", 1.0
    )
    journal.add_hung(hang)
    journal.close(remove=False)
    with open(tmp_path / "j.jsonl", "a") as f:
        f.write('{"t": "report", "data": {"nodeid": "t.py::z"')  # cut by a kill
    state = resume.load(tmp_path / "j.jsonl")
    assert list(state.reports) == ["t.py::x"]
    assert state.reports["t.py::x"][0]["user_properties"] == [["p", "/x"]]
    assert state.hang_of("t.py::y") == hang
    assert not (tmp_path / "j.jsonl").exists()  # the session's alone: removed once read


def test_born_since_uses_the_boot_clock_to_the_tick() -> None:
    """A child started right after a phase began counts as born in it: psutil's
    create_time() can be early by up to a second (boot time in whole seconds)."""
    before = procstart.now()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        started = procstart.process_started(child.pid)
        assert procstart.born_since(started, before)
        assert not procstart.born_since(started, procstart.now() + 0.5)
        assert child.pid in watcher.descendants(os.getpid(), skip=-1)
        assert child.pid not in watcher.descendants(os.getpid(), skip=child.pid)
    finally:
        child.kill()
        child.wait()
