"""The plugin's watcher fails under the session: the first test sends its own watcher
HANG_WATCHER_SIGNAL (KILL: it dies; STOP: it stalls, alive and silent); with STOP the
second test outlasts the plugin's stall limit. The session must go on, every test keeps its
result, and the summary says once that hang-watch stopped watching."""

import os
import signal
import time


def _watcher() -> int:
    me = f"--pid={os.getpid()}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"harness.pytest_plugin.watcher" in argv and me in argv:
                return int(entry)
    raise AssertionError("no watcher of this pytest")


def test_the_watcher_fails():
    os.kill(_watcher(), getattr(signal, "SIG" + os.environ["HANG_WATCHER_SIGNAL"]))


def test_outlasts_the_stall_limit():
    if os.environ["HANG_WATCHER_SIGNAL"] == "STOP":
        time.sleep(float(os.environ.get("HANG_STALL_WAIT", "12")))


def test_after_the_failure():
    assert sum(range(4)) == 6
