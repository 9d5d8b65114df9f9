"""The reaper process itself: follow the trainer's tree, kill it all if the harness dies.

It runs as a script (`python -I -S reaper_serve.py serve CTL_FD HARNESS_PID`, started by
`reaper.Reaper.start`; the why and the limits are in `reaper`'s module doc), so it imports
only the standard library: no site, no harness package, about 30 ms to start.

It holds the read end of a pipe whose write end only the harness holds, is told the
trainer's pid ("watch PID [COOKIE]"), and scans /proc every `POLL_S` seconds (backing off to
`IDLE_POLL_S` while the tree does not grow; less often on a host with thousands of
processes: a scan takes at most 5% of a core) to record, by pid AND start time (field 22 of
/proc/PID/stat), every process that belongs to the trainer: the trainer, any process whose
parent is recorded (so a grandchild that called setsid is known while its parent lives, and
stays known after), and every member of a recorded session (so an orphan whose parent died
is still known by its session). The trainer's environment also carries a random per-run
cookie (COOKIE_VAR), inherited by every descendant that keeps its environment. When the pipe
closes without "done" (the harness died, however), it kills them all: SIGSTOP to every
recorded live process and every process started since the trainer that carries the cookie
(an escapee no scan saw), rescanning until the set stops growing (a stopped process forks no
more, so no child escapes between scan and kill), then SIGKILL to each (through a pidfd
opened after checking the start time: a recycled pid is never signalled) and to the process
group of each recorded session, rescanning until nothing recorded is alive. It writes one
line to stderr and exits 0. After "done" (the harness killed and reaped the tree itself) it
exits without killing anything; after "kill" it kills the tree the same way, silently, and
exits: how a build ends.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

POLL_S = 0.2  # how often the reaper rescans /proc while the harness lives and the tree grows
# ... and at most how seldom, once the tree has stopped growing: each scan that finds no new
# process doubles the interval up to this; a birth brings it back to POLL_S. A long run's
# tree is mostly settled, and every harness run (and build) has a reaper scanning all of
# /proc: on a busy host (a test suite's hundreds of processes) that was most of its cost
IDLE_POLL_S = 1.0
KILL_DEADLINE_S = 5.0  # how long the reaper keeps rescanning and killing after the harness died
COOKIE_VAR = "HARNESS_REAPER_COOKIE"  # set in the trainer's environment: see reaper.new_cookie

# (state, ppid, session id, start time in clock ticks since boot)
Stat = tuple[str, int, int, int]


def read_stat(pid: int) -> Stat | None:
    """Parse /proc/PID/stat; None when the process is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # os.open: twice as fast as open()
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 2 :].split()  # comm may hold spaces and parens
    except (OSError, ValueError):
        return None
    # fields[0] is field 3 of proc(5): state, ppid, pgrp, session, ..., starttime (field 22)
    return fields[0].decode(), int(fields[1]), int(fields[3]), int(fields[19])


def snapshot() -> dict[int, Stat]:
    procs: dict[int, Stat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                procs[int(name)] = st
    return procs


class Tracker:
    """Everything that belongs to the trainer `root`, by pid and start time."""

    def __init__(self, root: int, cookie: str = "") -> None:
        self.root = root
        self.known: dict[int, int] = {}  # pid -> start time
        self.sessions: set[int] = set()  # sessions led by a recorded process
        self.me = os.getpid()
        # COOKIE_VAR=cookie in the trainer's environment, inherited by its descendants
        self.mark = f"{COOKIE_VAR}={cookie}".encode() if cookie else b""
        st = read_stat(root)
        self.root_start = 0 if st is None else st[3]
        if st is not None:
            self._record(root, st)

    def _record(self, pid: int, st: Stat) -> None:
        self.known[pid] = st[3]
        if st[2] == pid:
            self.sessions.add(pid)

    def _ours(self, pid: int, st: Stat, procs: dict[int, Stat]) -> bool:
        if pid == self.me:
            return False
        if self.known.get(pid) == st[3]:
            return True
        if st[2] in self.sessions:
            return True
        parent = procs.get(st[1])
        return parent is not None and self.known.get(st[1]) == parent[3]

    def _marked(self, pid: int, st: Stat) -> bool:
        """Started after the trainer and carrying its cookie in its environment."""
        if not self.mark or st[3] < self.root_start or st[0] in "ZX" or pid == self.me:
            return False
        data = b""
        try:
            fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
            try:
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
        except OSError:  # gone, or not ours to read
            return False
        return self.mark in data.split(b"\0")

    def scan(self, deep: bool = False) -> dict[int, Stat]:
        """Record every process of the tree alive now; forget the dead ones (a recycled
        pid has another start time, so it is never mistaken for a recorded one). `deep`
        (when killing): also every process that carries the trainer's cookie, which finds
        an orphan that left the session before any scan saw it."""
        procs = snapshot()
        self.known = {p: t for p, t in self.known.items() if p in procs and procs[p][3] == t}
        # an empty session's id can be reused: only a session with live members counts
        self.sessions &= {st[2] for st in procs.values()}
        if deep:
            for pid, st in procs.items():
                if self.known.get(pid) != st[3] and self._marked(pid, st):
                    self._record(pid, st)
        grew = True
        while grew:
            grew = False
            for pid, st in procs.items():
                if self.known.get(pid) != st[3] and self._ours(pid, st, procs):
                    self._record(pid, st)
                    grew = True
        return procs

    def alive(self, procs: dict[int, Stat]) -> list[int]:
        return [p for p in self.known if p in procs and procs[p][0] not in "ZX"]

    def signal(self, pid: int, sig: int) -> bool:
        """Send `sig` to `pid` only if it is still the recorded process."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:  # pidfd_open unsupported (kernel < 5.3): check, then kill by pid
            fd = -1
        try:
            st = read_stat(pid)
            if st is None or st[3] != self.known.get(pid):
                return False
            if fd >= 0:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
            return True
        except OSError:
            return False
        finally:
            if fd >= 0:
                os.close(fd)

    def kill_all(self, deadline_s: float = KILL_DEADLINE_S) -> int:
        """Freeze the tree, kill it, rescan until nothing recorded is left; the number of
        processes killed."""
        until = time.monotonic() + deadline_s
        stopped: set[int] = set()
        for _ in range(50):  # freeze: a stopped process forks no more
            new = [p for p in self.alive(self.scan(deep=True)) if p not in stopped]
            if not new:
                break
            for pid in new:
                self.signal(pid, signal.SIGSTOP)
                stopped.add(pid)
        killed: set[int] = set()
        while True:
            procs = self.scan(deep=True)
            alive = self.alive(procs)
            if not alive or time.monotonic() > until:
                return len(killed)
            for pid in alive:
                if self.signal(pid, signal.SIGKILL):
                    killed.add(pid)
            for sid in self.sessions:  # the session leader's process group, in one call
                with contextlib.suppress(OSError):
                    os.killpg(sid, signal.SIGKILL)
            time.sleep(0.02)


def serve(ctl_fd: int, harness_pid: int) -> int:
    """The reaper process: follow the tree until "done", "kill" or until the pipe closes."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # the harness's terminal is not ours
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.write(1, b"ready\n")
    except BrokenPipeError:
        return 0  # the harness was interrupted while starting us: nothing to watch
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the harness stops reading; nothing else goes there
    os.close(devnull)
    tracker: Tracker | None = None
    interval = calm = POLL_S
    buf = b""
    while True:
        ready, _, _ = select.select([ctl_fd], [], [], interval if tracker else None)
        if ready:
            chunk = os.read(ctl_fd, 4096)
            if not chunk:  # the harness is gone without saying "done"
                if tracker is None:
                    return 0
                killed = tracker.kill_all()
                _note(
                    f"the harness (pid {harness_pid}) died; killed {killed} process(es) of "
                    f"the tree of pid {tracker.root}"
                )
                return 0
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                words = line.split()
                if words[:1] == [b"done"]:
                    return 0
                if words[:1] == [b"kill"]:  # the harness ends the tree through us (a build)
                    if tracker is not None:
                        tracker.kill_all()
                    return 0
                if words[:1] == [b"watch"] and len(words) in (2, 3):
                    cookie = words[2].decode() if len(words) == 3 else ""
                    tracker = Tracker(int(words[1]), cookie)
        if tracker is not None:
            t0 = time.monotonic()
            before = set(tracker.known)
            tracker.scan()
            # a tree that stopped growing is scanned less and less often (IDLE_POLL_S at
            # most); a new process brings the interval back to POLL_S
            calm = POLL_S if set(tracker.known) - before else min(IDLE_POLL_S, 2 * calm)
            # on a host with thousands of processes, scan less often: at most 5% of a core
            interval = max(calm, 20 * (time.monotonic() - t0))


def _note(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"harness reaper: {message}\n".encode())


def main(args: list[str]) -> int:
    if args[:1] == ["serve"] and len(args) == 3:
        return serve(int(args[1]), int(args[2]))
    _note("usage: reaper_serve.py serve CTL_FD HARNESS_PID")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
