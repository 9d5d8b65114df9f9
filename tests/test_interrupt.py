"""Ctrl-C at any moment, for real: SIGINT sent to a running `harness` at fixed delays from
its start (while Python starts, while the commands are imported, while the command line is
read, once the report folder exists), during a real build and during the run. Each ends
with exit 130, no traceback, and either one line saying nothing was written (no run folder)
or a report.json with a final status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.outcome import Kind, interrupted_code
from harness.report.load import load_report
from harness.report.model import Report
from harness.vocab import RunStatus
from tests.harness_cli import (
    ROOT,
    communicate_and_kill,
    in_session,
    only_report_dir,
    verdict_of,
    wait_for_trainer,
    watch_opts,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.spread]
SIGINT_CODE = interrupted_code(signal.SIGINT)
DELAYS_S = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
# windows long enough that the program is still running at the last delay
LONG = watch_opts(startup=30, stall=30, quiescent=0, timeout=60, quiet=True)
NOTHING_WRITTEN = "nothing was written"


@pytest.fixture(autouse=True)
def _sigint_not_ignored() -> Iterator[None]:
    """The harnesses start with SIGINT at its default, as under a terminal's Ctrl-C.

    A shell without job control starts a background job (`pytest ... &`, a CI script's
    `cmd &`) with SIGINT ignored, and an ignored signal stays ignored across fork and exec:
    every harness this test starts would then lose a SIGINT that lands before its own
    handlers (in CPython's start-up), and run on to its verdict (exit 2, nothing said). A
    caught signal is reset to its default by exec: catching it here for the test's length
    gives the children the default."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return in_session([sys.executable, "-m", "harness", *args], {**os.environ, **(env or {})})


def exec_done(pid: int, timeout: float = 10) -> None:
    """The child has exec'd the interpreter (its command line is the harness's own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if b"\0-m\0harness\0" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return
        except OSError:
            return  # gone already: nothing to wait for
        time.sleep(0.001)


def ended(proc: subprocess.Popen[bytes], timeout: float = 60) -> tuple[int, str]:
    _, err = communicate_and_kill(proc, timeout)
    return proc.returncode, err.decode(errors="replace")


def cpython_frames_only(stderr: str) -> bool:
    """A traceback whose every frame is CPython's own (<frozen …>, the standard library, the
    venv's .pth code), none of a file of the harness."""
    frames = re.findall(r'^\s*File "([^"]+)"', stderr, re.M)
    ours = str(ROOT / "harness") + os.sep
    return bool(frames) and not any(f.startswith(ours) for f in frames)


def before_the_harness(code: int, stderr: str) -> bool:
    """The signal came while CPython itself was starting, before the harness's first line
    ran (no handler of ours can exist yet): death by SIGINT (the default action; a shell
    reports 130 all the same), or CPython's own fatal error while making sys.stderr or
    importing `site` (the venv's .pth files). Nothing of the harness ran, so nothing can
    have been written."""
    if code == -signal.SIGINT and stderr == "":
        return True
    cpython = re.match(r"Fatal Python error: init_(import_site|sys_streams)", stderr) is not None
    # or runpy still looking for the package `harness` (`python -m`): a KeyboardInterrupt
    # whose every frame is CPython's own; CPython then ends itself by SIGINT (exit -2), or
    # exits 1 when runpy itself was being imported
    runpy = stderr.rstrip().endswith("KeyboardInterrupt") and cpython_frames_only(stderr)
    return (code == 1 and cpython) or (code in (1, -signal.SIGINT) and runpy)


def dropped_by_cpython(stderr: str) -> bool:
    """The signal came while CPython was starting, after it installed its own SIGINT
    handler and before the harness's first line, and CPython dropped the KeyboardInterrupt
    itself, saying so: raised in importlib's module-lock callback ("Exception ignored in:
    <function _get_module_lock.<locals>.cb …>") or in a venv .pth line ("Error processing
    line 1 of …pth … Remainder of file ignored"). Then it ran the harness, which never got
    the signal: no handler of the harness can see or undo that (gdb-reproduced; the same
    drop after the harness's own handlers are installed is re-delivered: harness.cli)."""
    said = "Exception ignored in" in stderr or "Remainder of file ignored" in stderr
    return said and "KeyboardInterrupt" in stderr and cpython_frames_only(stderr)


def assert_interrupted(code: int, stderr: str, root: Path, when: str) -> Report | None:
    """Exit 130 without a traceback; the run folder, if any, holds a finished report.json
    (returned), else the harness said nothing was written."""
    if before_the_harness(code, stderr):
        assert only_report_dir(root) is None, when
        return None
    if dropped_by_cpython(stderr):  # the harness then ran as if never interrupted
        folder = only_report_dir(root)
        assert folder is not None, f"{when}: {stderr}"
        return None
    assert "Traceback" not in stderr, f"{when}: {stderr}"
    assert code == SIGINT_CODE, f"{when}: exit {code}: {stderr}"
    folder = only_report_dir(root)
    if folder is None:
        assert NOTHING_WRITTEN in stderr, f"{when}: {stderr}"
        return None
    assert NOTHING_WRITTEN not in stderr, f"{when}: {stderr}"
    report = load_report(folder)
    finished = (RunStatus.INTERRUPTED, RunStatus.COMPLETE, RunStatus.FAILED)
    assert report.status in finished, (when, report.status)
    return report


def test_sigint_at_any_moment_exits_130_with_a_report_or_a_line(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    program = str(c_program("mutex_deadlock"))
    runs = []
    for delay in DELAYS_S:  # all at once: the delays are from each one's start
        root = tmp_path / f"reports-{delay}"
        proc = start(["watch", "--report-dir", str(root), *LONG, "--", program])
        runs.append((delay, root, proc, time.monotonic()))
    for delay, _, proc, started in runs:
        time.sleep(max(0.0, started + delay - time.monotonic()))
        # after the exec (Popen returns only once the child has exec'd; this makes it
        # plain). A harness that ran on to its hang verdict (exit 2) after this signal had
        # it dropped by CPython as "unraisable" (dropped_by_cpython), or, once its own
        # handlers were in, by the same drop, which harness.cli now re-delivers
        exec_done(proc.pid)
        proc.send_signal(signal.SIGINT)
    outcomes: list[int | str] = []
    seen: list[tuple[float, int, list[str]]] = []  # shown when the last assertion fails
    for delay, root, proc, _ in runs:
        code, stderr = ended(proc)
        report = assert_interrupted(code, stderr, root, f"SIGINT after {delay}s")
        outcomes.append(report.status if report else code)
        seen.append((delay, code, stderr.strip().splitlines()[-1:]))
    # the later delays reach the harness's own handlers (the early one, or main's)
    assert SIGINT_CODE in outcomes or any(isinstance(o, str) for o in outcomes), seen


def test_sigint_during_the_build_finishes_the_report(tmp_path: Path) -> None:
    """A real build of the replica, interrupted once report.json says the build stage has
    begun. The cache is the test's own and empty: with the session's shared cache another
    test may have built the replica already, and a cached build ends before a look at
    report.json can see its stage (CI once saw the run reach its verdict instead)."""
    root = tmp_path / "reports"
    cache = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    proc = start(["run", "breakout", "--report-dir", str(root), "--quiet"], cache)
    deadline = time.monotonic() + 60
    while stage_of(root) != "build":
        assert proc.poll() is None, f"the harness ended before its build: {ended(proc)}"
        assert time.monotonic() < deadline, "the build stage did not begin within 60s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    code, stderr = ended(proc)
    report = assert_interrupted(code, stderr, root, "during the build")
    assert report is not None
    got = (report.status, verdict_of(report).kind)
    assert got == (RunStatus.INTERRUPTED, Kind.INTERRUPTED), got
    assert "interrupted by signal 2 at stage build" in report.notes
    assert stderr.strip().splitlines()[-1] == (
        "harness: interrupted by signal 2 at stage build; report (status interrupted): "
        f"{only_report_dir(root)}"
    )


def test_sigint_during_the_run_finishes_the_report(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    root = tmp_path / "reports"
    proc = start(["watch", "--report-dir", str(root), *LONG, "--", str(c_program("sleepers"))])
    wait_for_trainer(proc, root, timeout=60)
    proc.send_signal(signal.SIGINT)
    code, stderr = ended(proc)
    report = assert_interrupted(code, stderr, root, "during the run")
    assert report is not None
    got = (report.status, verdict_of(report).kind)
    assert got == (RunStatus.INTERRUPTED, Kind.INTERRUPTED), got


def stage_of(root: Path) -> str | None:
    folder = only_report_dir(root)
    try:
        data = json.loads((folder / "report.json").read_text()) if folder else {}
    except (OSError, ValueError):  # not written yet (atomic writes: never half a file)
        return None
    stage = data.get("stage")
    return stage if isinstance(stage, str) else None
