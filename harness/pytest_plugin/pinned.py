"""The functions the plugin calls inside pytest's process, taken once, when the plugin is
imported (pytest loads it before any conftest or test module).

A test may replace any module attribute for its duration: `monkeypatch.setattr(os, "write",
lambda fd, b: 0)` to simulate a zero-length write, `mock.patch("time.monotonic")`,
`mock_open` over `builtins.open`, freezegun over every `time` function it finds in a module's
globals, a `signal.signal` that refuses. Had the plugin looked them up at the time of the
call, its own channel would have written nothing for ever, its clocks stood still, its files
read the test's fake contents. So every such call goes through `P`, an object (not module
globals: freezegun rewrites those that hold the real `time` functions) that holds what the
names meant at import. The C methods of objects the plugin made itself (a socket, a lock, a
poll object, an mmap) need no pinning: a test cannot patch a built-in type."""

from __future__ import annotations

import _thread
import builtins
import json
import os
import select
import signal
import sys
import threading
import time
from typing import Any


class Pinned:
    """What the names meant when the plugin was imported (read-only by convention: the
    plugin never rebinds them, a test has no reason to know they exist)."""

    __slots__ = (
        "allocate_lock",
        "chdir",
        "clock_gettime",
        "close",
        "dumps",
        "dup",
        "dup2",
        "enumerate",
        "execve",
        "fstat",
        "get_native_id",
        "getpid",
        "getsignal",
        "kill",
        "listdir",
        "loads",
        "monotonic",
        "open",
        "os_open",
        "pidfd_open",
        "pidfd_send_signal",
        "poll",
        "posix_spawn",
        "pthread_kill",
        "read",
        "set_inheritable",
        "setitimer",
        "signal",
        "sleep",
        "time",
        "timer_class",
        "waitpid",
        "write",
    )

    def __init__(self) -> None:
        self.allocate_lock = _thread.allocate_lock
        self.chdir = os.chdir
        self.clock_gettime = time.clock_gettime
        self.close = os.close
        self.dumps = json.dumps
        self.dup = os.dup
        self.dup2 = os.dup2
        self.enumerate = threading.enumerate
        self.execve = os.execve
        self.fstat = os.fstat
        self.get_native_id = threading.get_native_id
        self.getpid = os.getpid
        self.getsignal = signal.getsignal
        self.kill = os.kill
        self.listdir = os.listdir
        self.loads = json.loads
        self.monotonic = time.monotonic
        self.open = builtins.open
        self.os_open = os.open
        self.pidfd_open = os.pidfd_open
        self.pidfd_send_signal = signal.pidfd_send_signal
        self.poll = select.poll
        self.posix_spawn = os.posix_spawn
        self.pthread_kill = signal.pthread_kill
        self.read = os.read
        self.set_inheritable = os.set_inheritable
        self.setitimer = signal.setitimer
        self.signal = signal.signal
        self.sleep = time.sleep
        self.time = time.time
        self.timer_class: type[Any] = threading.Timer
        self.waitpid = os.waitpid
        self.write = os.write


P = Pinned()
# the interpreter and its command line, as pytest was started (a test may set either)
EXECUTABLE = sys.executable
ORIG_ARGV = tuple(sys.orig_argv)


def read_small(path: str, limit: int = 65536) -> bytes | None:
    """A small file's bytes (a /proc stat file), None when it cannot be read: raw
    descriptors, so that a test's `mock_open` is never what the plugin reads."""
    try:
        fd = P.os_open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return P.read(fd, limit)
    except OSError:
        return None
    finally:
        P.close(fd)


def kill_pending(pid: int) -> bool:
    """Whether `pid` has a SIGKILL pending (/proc/PID/status SigPnd or ShdPnd): killed, but
    not yet scheduled to die (on a loaded host that can take a while)."""
    data = read_small(f"/proc/{pid}/status") if pid > 0 else None
    for line in (data or b"").splitlines():
        key, _, value = line.partition(b":")
        if key in (b"SigPnd", b"ShdPnd"):
            try:
                if int(value.strip(), 16) >> (signal.SIGKILL - 1) & 1:
                    return True
            except ValueError:
                return False
    return False


def write_all(fd: int, data: bytes, tries: int = 8) -> bool:
    """Write `data` in a bounded number of writes: a zero-length write or a full disk ends
    it (False), never a loop that spins."""
    view = memoryview(data)
    for _ in range(tries):
        try:
            n = P.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        if not isinstance(n, int) or n <= 0:
            return False
        view = view[n:]
        if not view:
            return True
    return False
