"""Start a command in its own session and make sure its whole tree dies and is reaped.

Used by the runner for the trainer and by every external tool call (`tools.run_tool`:
build, gdb, py-spy, git), so that nothing the harness starts can outlive it or leave
zombies behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants, so that a trainer's grandchildren are reaped by us and
    not left as zombies under a container's PID 1 that may never reap them."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def session_members(sid: int) -> list[psutil.Process]:
    """Every live process whose session id is `sid` (the trainer's own session)."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(proc.pid) == sid:
                members.append(proc)
    return members


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


@dataclass
class KillReport:
    killed: list[int] = field(default_factory=list)
    leftover: list[int] = field(default_factory=list)
    reaped: list[int] = field(default_factory=list)


def living(proc: psutil.Process) -> bool:
    """Running, and not a zombie waiting for its parent to reap it."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap(pids: Iterable[int]) -> list[int]:
    reaped = []
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                reaped.append(pid)
    return reaped


class Waitable(Protocol):
    """What kill_tree waits for: a `subprocess.Popen`, or a child forked by the zygote."""

    @property
    def returncode(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | None: ...


def kill_tree(
    proc: Waitable | None,
    sid: int,
    extra: Iterable[psutil.Process] = (),
    grace_s: float = 5.0,
) -> KillReport:
    """SIGKILL the session, every known descendant and `extra`, then reap what is ours.

    Stragglers that left the session (setsid) are caught through `extra`, the descendants
    the runner saw while the command ran.
    """
    report = KillReport()
    deadline = time.monotonic() + grace_s
    known: dict[int, psutil.Process] = {p.pid: p for p in extra}
    while True:
        targets = session_members(sid) + descendants(sid)
        for p in targets:
            known.setdefault(p.pid, p)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        alive = []
        for pid, p in known.items():
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
                    if pid not in report.killed:
                        report.killed.append(pid)
                    alive.append(p)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        report.reaped += _reap(known)
        psutil.wait_procs(alive, timeout=0.5)
        report.reaped += _reap(known)
        remaining = [p for p in session_members(sid) if living(p)]
        if not remaining or time.monotonic() > deadline:
            report.reaped += _reap_late_orphans(known)
            report.leftover = [p.pid for p in remaining]
            return report


def _reap_late_orphans(known: Iterable[int], wait_s: float = 1.0) -> list[int]:
    """A grandchild killed together with its parent is re-parented to us (the subreaper)
    only once that parent is gone, possibly after the reaping above: wait briefly until
    every known pid has been reaped, by us or by whoever is its parent now."""
    pids = set(known)
    reaped: list[int] = []
    until = time.monotonic() + wait_s
    while pids and time.monotonic() < until:
        reaped += _reap(pids)
        pids = {pid for pid in pids if psutil.pid_exists(pid)}
        if pids:
            time.sleep(0.02)
    return reaped
