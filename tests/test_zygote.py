"""The zygote (harness/process/zygote.py): child harnesses forked from one warm process.

Real processes throughout: the zygote imports the real harness, forks real `harness watch`
runs of a real deadlocked C program, and the parent that owns it is SIGKILLed for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from harness.outcome import USAGE, Kind, exit_code, interrupted_code
from harness.pipeline.children import ZYGOTE_ENTRY, ZYGOTE_PRELOAD
from harness.process.zygote import DISABLE_VAR, Zygote
from harness.report.load import load_report
from harness.vocab import RunStatus
from tests.harness_cli import (
    ROOT,
    only_report_dir,
    trainer_of,
    verdict_of,
    wait_for_trainer,
    watch_opts,
)

pytestmark = [pytest.mark.timeout(120)]
PROGRAM = str(ROOT / "harness" / "__main__.py")
# a watch that keeps its deadlocked program running (no quiescence, long windows)
HOLD = watch_opts(startup=60, stall=60, quiescent=0, timeout=60, quiet=True)


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote.start(ZYGOTE_ENTRY, ZYGOTE_PRELOAD, ["harness"])
    assert z is not None, "the zygote did not start"
    try:
        yield z
    finally:
        z.close()


def spawn(z: Zygote, *args: str, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    child = z.spawn(
        [PROGRAM, *args],
        dict(os.environ),
        str(cwd),
        subprocess.DEVNULL,
        subprocess.PIPE,
        subprocess.PIPE,
    )
    assert child is not None, "the zygote refused the run"
    return child  # type: ignore[return-value]  # the Popen subset the tests use


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True  # dead, waiting for its parent (init) to reap it
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_run_is_the_cli_with_its_own_argv_session_and_exit_code(
    zygote: Zygote, tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    program = str(c_program("mutex_deadlock"))
    args = ["watch", "--report-dir", str(tmp_path), "--quiescent", "2", "--quiet", "--", program]
    child = spawn(zygote, *args)
    assert os.getsid(child.pid) == child.pid  # its own session, like an exec'd child
    assert psutil.Process(child.pid).ppid() == zygote.pid
    _, err = child.communicate(timeout=90)
    assert child.returncode == exit_code(Kind.HANG), err
    folder = only_report_dir(tmp_path)
    assert folder is not None
    report = load_report(folder)
    assert verdict_of(report).kind is Kind.HANG
    # what `python -m harness ARGS` records: sys.argv, __main__.py first
    assert report.harness_argv == [PROGRAM, *args]


def test_usage_errors_and_the_environment_are_the_childs_own(
    zygote: Zygote, tmp_path: Path
) -> None:
    child = zygote.spawn(
        [PROGRAM, "run", "no-such-env", "--report-dir", str(tmp_path)],
        {**os.environ, "NO_COLOR": "1"},
        str(tmp_path),
        subprocess.DEVNULL,
        subprocess.PIPE,
        subprocess.PIPE,
    )
    assert child is not None
    out, err = child.communicate(timeout=60)
    assert child.returncode == USAGE, (out, err)
    assert err.decode().startswith("harness: error: "), err
    assert "Traceback" not in err.decode()


def test_a_signal_reaches_the_run_through_its_pidfd(
    zygote: Zygote, tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    program = str(c_program("mutex_deadlock"))
    child = spawn(zygote, "watch", "--report-dir", str(tmp_path), *HOLD, "--", program)
    wait_for_trainer(child, tmp_path, 60)  # its report says running, its trainer is up
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == interrupted_code(signal.SIGTERM), err
    folder = only_report_dir(tmp_path)
    assert folder is not None
    assert load_report(folder).status is not RunStatus.RUNNING


def test_nothing_outlives_a_sigkilled_parent(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """The parent (a harness-like process that owns the zygote) dies by SIGKILL while a
    forked run watches a deadlocked program: the zygote, the run and its trainer all die."""
    program = str(c_program("mutex_deadlock"))
    parent_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from harness.process.zygote import Zygote
        z = Zygote.start({ZYGOTE_ENTRY!r}, {list(ZYGOTE_PRELOAD)!r}, ["harness"])
        c = z.spawn([{PROGRAM!r}, "watch", "--report-dir", {str(tmp_path)!r}, *{HOLD!r},
                     "--", {program!r}], dict(os.environ), {str(ROOT)!r},
                    subprocess.DEVNULL, subprocess.DEVNULL, subprocess.DEVNULL)
        print(z.pid, c.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        zygote_pid, child_pid = map(int, parent.stdout.readline().split())
        deadline = time.monotonic() + 60
        while not (trainer := trainer_of(child_pid, tmp_path)):
            assert time.monotonic() < deadline, "the run's trainer never started"
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        assert gone(zygote_pid), "the zygote outlived its parent"
        assert gone(child_pid), "the forked run outlived the zygote"
        assert gone(trainer.pid), "the run's trainer outlived it"
    finally:
        parent.kill()
        parent.wait()


def test_closing_the_zygote_ends_a_run_still_going(
    zygote: Zygote, tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    program = str(c_program("mutex_deadlock"))
    child = spawn(zygote, "watch", "--report-dir", str(tmp_path), *HOLD, "--", program)
    zygote.close()
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL


def test_a_preload_that_starts_a_thread_is_refused(tmp_path: Path) -> None:
    """A zygote never forks a threaded process: it says so, and the caller execs."""
    (tmp_path / "threaded_preload.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    sys.path.insert(0, str(tmp_path))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), old]))
    try:
        assert Zygote.start(ZYGOTE_ENTRY, ["threaded_preload"], ["harness"]) is None
    finally:
        sys.path.remove(str(tmp_path))
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def test_turned_off_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_VAR, "1")
    assert Zygote.start(ZYGOTE_ENTRY, ZYGOTE_PRELOAD, ["harness"]) is None


def test_an_oversized_request_is_refused_alone(zygote: Zygote, tmp_path: Path) -> None:
    """A run whose argv and environment pass the request limit is refused (the caller execs
    it); the zygote goes on serving the next one."""
    big = {**os.environ, "HUGE": "x" * (2 << 20)}
    refused = zygote.spawn(
        [PROGRAM, "--version"], big, str(tmp_path), subprocess.DEVNULL, subprocess.PIPE,
        subprocess.PIPE,
    )  # fmt: skip
    assert refused is None
    child = spawn(zygote, "--version")
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out.startswith(b"harness ")
