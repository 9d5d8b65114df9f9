"""Starting pytest again in its own process after a hang that cannot be interrupted, two ways.

- The plugin's listener does it (`exec_now`) when the main thread is stuck in native code
  with the GIL released: the listener still runs Python.
- The watcher does it through gdb (`traced_exec`) when nothing of Python runs in pytest any
  more (a C extension deadlocked with the GIL held): gdb attaches and calls, in pytest's
  main thread, `dup2` for the standard descriptors, `chdir`, `alarm(0)` and `execve`, then
  detaches at the exec. Every argument is already in pytest's memory: the plugin built the
  `ExecBlock` (C strings and arrays, kept alive by the plugin) before the first test and
  told the watcher their addresses, so nothing is allocated in a process whose allocator a
  stuck thread may hold.

Either way the pid stays, the parent that waits for pytest still waits for it, and the
resumed session reads the journal (`resume`). The standard descriptors are those pytest
had at its start (a capture or a test may hold 1 and 2), the interval timer is cleared
(pytest-timeout's SIGALRM would otherwise end the new image before it installs a handler)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.pytest_plugin import channel
from harness.pytest_plugin.pinned import EXECUTABLE, P, write_all

GDB_S = 30.0  # attach, three calls, the registers, detach: about a second when loaded
EXEC_S = 5.0  # from gdb's detach to the new image (its environment names the journal)


@dataclass
class ExecBlock:
    """The exec's arguments as C objects in this process; `std` are dups of the standard
    descriptors taken at the start."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    std: list[int]
    keep: list[Any] = field(default_factory=list)  # the ctypes objects the addresses name

    def __post_init__(self) -> None:
        self.c_path = ctypes.create_string_buffer(os.fsencode(EXECUTABLE))
        args = [os.fsencode(a) for a in self.argv]
        self.c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        envs = [os.fsencode(f"{k}={v}") for k, v in self.env.items()]
        self.c_envp = (ctypes.c_char_p * (len(envs) + 1))(*envs, None)
        self.c_cwd = ctypes.create_string_buffer(os.fsencode(self.cwd))
        # the arrays hold pointers into these bytes objects: they must live as long
        self.keep = [args, envs]

    def addresses(self) -> dict[str, Any]:
        return {
            "path": ctypes.addressof(self.c_path),
            "argv": ctypes.addressof(self.c_argv),
            "envp": ctypes.addressof(self.c_envp),
            "cwd": ctypes.addressof(self.c_cwd),
            "std": list(self.std),
        }

    def exec_now(self) -> None:
        """From the listener thread; returns only if the exec failed."""
        for target, saved in enumerate(self.std):
            with contextlib.suppress(OSError):
                P.dup2(saved, target)
        with contextlib.suppress(OSError, ValueError):
            P.setitimer(signal.ITIMER_REAL, 0)
        try:
            P.chdir(self.cwd)
            P.execve(EXECUTABLE, self.argv, self.env)
        except OSError:
            return


def append_hung(path: Path, hang: channel.Hang) -> bool:
    """The watcher's side: the verdict added to the journal of a process that runs no
    Python any more (its main thread holds the GIL)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return write_all(fd, (P.dumps({"t": "hung", **hang.to_json()}) + "\n").encode())
    finally:
        os.close(fd)


def traced_exec(pid: int, block: dict[str, Any], journal: str) -> str | None:
    """The watcher's side: make `pid` exec the block through gdb. None when done (the new
    image's environment names `journal`), else why not (no gdb, ptrace refused, another
    architecture, the exec did not happen)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "gdb is not installed"
    if platform.machine() != "x86_64":
        return f"starting pytest again through gdb is done on x86_64 only ({platform.machine()})"
    try:
        std = [int(fd) for fd in block["std"]]
        path, argv, envp, cwd = (int(block[k]) for k in ("path", "argv", "envp", "cwd"))
    except (KeyError, TypeError, ValueError):
        return "pytest sent no exec block"
    # dup2, chdir and alarm are called and return. execve is not called through gdb (gdb
    # waiting on a call whose thread execs races with the other threads' exit and can hang
    # both): the main thread is set to enter it, with a null return address (a failed exec
    # ends the process, as the kill it replaces would), and gdb detaches. orig_rax -1: the
    # interrupted futex wait is not restarted over the new pc.
    script = [f"call (int)dup2({fd}, {target})" for target, fd in enumerate(std)]
    script += [
        f"call (int)chdir((char*){cwd})",
        "call (unsigned int)alarm(0)",
        "set $orig_rax = -1",
        "set $rsp = (((long)$rsp - 1024) & -16) - 8",
        "set *(long*)$rsp = 0",
        f"set $rdi = {path}",
        f"set $rsi = {argv}",
        f"set $rdx = {envp}",
        "set $pc = (long)execve",
        "detach",
    ]
    cmd = [gdb, "-nx", "-batch", "-p", str(pid), "-ex", "set confirm off"]
    for line in script:
        cmd += ["-ex", line]
    try:
        out = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GDB_S,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        said = (exc.stdout or b"") + (exc.stderr or b"")
        text = said.decode(errors="replace") if isinstance(said, bytes) else str(said)
        return f"gdb did not finish within {GDB_S:g}s ({_last(text)})"
    except OSError as exc:
        return f"gdb did not run ({exc})"
    marker = f"{channel.RESUME_ENV}={journal}".encode()
    end = time.monotonic() + EXEC_S
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    return None
        except OSError:
            break  # gone: the exec failed and the process ended
        time.sleep(0.05)
    return f"gdb could not make pytest start again ({_last(out.stdout + out.stderr)})"


def _last(text: str) -> str:
    return " / ".join([line for line in text.splitlines() if line.strip()][-4:])
