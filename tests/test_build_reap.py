"""The build's processes are reaped like the trainer's (issue 17): a build command whose
tree outlives it — a child in its session, a child that called setsid, a double fork into a
new session whose parent is gone — is killed whole when the harness is SIGKILLed mid-build
(its reaper), when the build times out, and when the harness is told to stop (SIGTERM).
Real processes: `harness build` in its own session, found by a marker in their environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.outcome import BUILD_FAILED
from tests.harness_cli import in_session

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parent.parent

# three long-lived descendants of the build command: one in its session, one that left it
# (setsid) while its parent lives, one double-forked into its own session (its parent, the
# subshell, exits at once: only the reaper's cookie can find it)
TREE = "sleep 300 &\nsetsid sleep 300 &\n( setsid sleep 300 & )\ntouch started\nwait\n"


def _pin(tmp_path: Path, timeout_s: int) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "build.sh").write_text(TREE + "touch out\n")
    pin = tmp_path / "reap.toml"
    pin.write_text(
        "schema_version = 1\n"
        'name = "reap"\nenvs = ["breakout"]\nparser = "puffer5"\n'
        f'[source]\nkind = "path"\npath = "{src}"\n'
        f'[build]\ncommand = "bash build.sh"\ntimeout_s = {timeout_s}\noutputs = ["out"]\n'
        '[run]\ncommand = "./out"\n'
    )
    return pin


def _marked(mark: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment holds REAP_TEST=`mark`."""
    want = f"REAP_TEST={mark}".encode()
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                if want in fh.read().split(b"\0"):
                    found.append(p)
    return found


def _sleeps(mark: str) -> list[psutil.Process]:
    out = []
    for p in _marked(mark):
        with contextlib.suppress(psutil.Error):
            if p.name() == "sleep":
                out.append(p)
    return out


def _start(tmp_path: Path, timeout_s: int) -> tuple[subprocess.Popen[bytes], str]:
    mark = uuid.uuid4().hex
    env = {
        **os.environ,
        "HARNESS_CACHE_DIR": str(tmp_path / "cache"),
        "REAP_TEST": mark,  # inherited by the harness, its reaper and the whole build
    }
    argv = [
        sys.executable,
        "-m",
        "harness",
        "build",
        "breakout",
        "--pin",
        str(_pin(tmp_path, timeout_s)),
    ]
    proc = in_session(argv, env)
    return proc, mark


def _wait_for_tree(proc: subprocess.Popen[bytes], mark: str) -> list[psutil.Process]:
    deadline = time.monotonic() + 20
    while len(found := _sleeps(mark)) < 3:
        if proc.poll() is not None:
            pytest.fail(f"the harness exited {proc.returncode}: {proc.communicate()}")
        if time.monotonic() > deadline:
            pytest.fail(f"the build's three sleeps did not start: {found}")
        time.sleep(0.05)
    return found


def _all_gone(mark: str, within: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _cleanup(proc: subprocess.Popen[bytes], mark: str) -> None:
    # whatever the harness under test failed to kill must not outlive this test
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in _marked(mark):
        with contextlib.suppress(psutil.Error):
            p.kill()
    proc.communicate(timeout=10)


def test_sigkilled_harness_mid_build_leaves_no_build_process(tmp_path: Path) -> None:
    proc, mark = _start(tmp_path, timeout_s=120)
    try:
        sleeps = _wait_for_tree(proc, mark)
        sessions = {os.getsid(p.pid) for p in sleeps}
        assert len(sessions) == 3, sessions  # the tree really spread over three sessions
        os.kill(proc.pid, signal.SIGKILL)  # the harness only: not its process group
        proc.wait(timeout=10)
        left = _all_gone(mark, within=8)
        assert left == [], [(p.pid, p.cmdline()) for p in left]
    finally:
        _cleanup(proc, mark)


def test_build_timeout_kills_the_whole_build_tree(tmp_path: Path) -> None:
    proc, mark = _start(tmp_path, timeout_s=3)
    try:
        _wait_for_tree(proc, mark)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == BUILD_FAILED, err
        assert b"build timed out after 3s" in err, err
        # the harness has exited: nothing of the build (nor its reaper) is left
        left = _all_gone(mark, within=8)
        assert left == [], [(p.pid, p.cmdline()) for p in left]
    finally:
        _cleanup(proc, mark)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_harness_told_to_stop_mid_build_kills_the_whole_build_tree(
    sig: signal.Signals, tmp_path: Path
) -> None:
    proc, mark = _start(tmp_path, timeout_s=120)
    try:
        _wait_for_tree(proc, mark)
        os.kill(proc.pid, sig)
        proc.communicate(timeout=30)
        assert proc.returncode != 0
        left = _all_gone(mark, within=8)
        assert left == [], [(p.pid, p.cmdline()) for p in left]
    finally:
        _cleanup(proc, mark)
