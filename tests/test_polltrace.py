"""What a polling loop polls (sampling/polltrace.py): strace's lines read into calls and
paths, and a real Python loop polling for a lock file traced for a second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.sampling import polltrace
from tests import facts

LINES = """\
openat(AT_FDCWD, "/tmp/x.lock", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = -1 EEXIST (File exists)
clock_nanosleep(CLOCK_MONOTONIC, 0, {tv_sec=0, tv_nsec=50000000}, NULL) = 0
openat(AT_FDCWD, "/tmp/x.lock", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = -1 EEXIST (File exists)
clock_nanosleep(CLOCK_MONOTONIC, 0, {tv_sec=0, tv_nsec=50000000}, <unfinished ...>
"""


def test_strace_lines_are_read_into_calls_and_paths(tmp_path: Path) -> None:
    found = polltrace.parse(LINES, 1.0)
    assert found.calls == {"openat": 2, "clock_nanosleep": 2}
    assert found.paths == {("/tmp/x.lock", "openat", "EEXIST"): 2}
    lock = tmp_path / "held.lock"
    lock.write_text("999999\n")  # a pid that cannot exist (above pid_max's 2**22)
    words = polltrace.parse(LINES.replace("/tmp/x.lock", str(lock)), 1.0).words()
    assert f"polls {lock} (openat → EEXIST) 2 times in 1.0s, every ~0.50s" in words
    assert "last written" in words
    no_path = "getpid() = 12\nclock_nanosleep(CLOCK_MONOTONIC, 0, {}, NULL) = 0\n" * 2
    sleeps = polltrace.parse(no_path, 1.0).words()
    assert "getpid ×2" in sleeps and "2 timed sleep" in sleeps
    assert polltrace.parse("", 1.0).words() == "made no syscall in 1.0s of tracing"
    # a loop that checks something polls; a thread that only sleeps does not
    assert found.polls() and polltrace.parse(no_path, 1.0).polls()
    only_sleeps = "clock_nanosleep(CLOCK_MONOTONIC, 0, {}, NULL) = 0\n" * 3
    assert not polltrace.parse(only_sleeps, 1.0).polls()
    assert not polltrace.parse("", 1.0).polls()


POLLER = """
import os, sys, time
print("polling", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""


@pytest.mark.timeout(30)
def test_a_real_polling_loop_is_traced(tmp_path: Path) -> None:
    facts.require_tool("strace", why="the polling trace runs strace")
    flag = tmp_path / "never"
    proc = subprocess.Popen(
        [sys.executable, "-c", POLLER, str(flag)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "polling\n"
        found = polltrace.trace(proc.pid, seconds=1.0)
        assert isinstance(found, polltrace.PollTrace), found
        (path, _, err), n = found.paths.most_common(1)[0]
        assert (path, err) == (str(flag), "ENOENT") and n >= 5, found.paths
        assert "it does not exist" in found.words()
        assert proc.poll() is None  # detached: the loop goes on
    finally:
        proc.kill()
        proc.wait(timeout=5)
