"""Polling loops resolved to what they poll (docs/quiescence.md, "Polling loops"): a thread
that wakes on a timer, tries a lock without waiting (fcntl F_SETLK, F_OFD_SETLK, flock
LOCK_NB), is refused, and sleeps again at the same site with no other effect waits on that
lock as surely as a thread in F_SETLKW: its wakers are the lock's holders (/proc/locks),
the poller's own process included (a second handle on a lock file the process holds).

While the rest of the tree is blocked, each such loop is traced once for TRACE_S (strace,
under way between looks: the watch loop goes on) and, when the trace shows only sleeps and
looks (stats, reads, the refused lock) and every holder is in the tree, the thread's wait
becomes that lock: on the tree, resolved, a member of a closed set like any other. The
reading holds while the thread stays in the same loop: a look that finds it blocked in any
other call, or its process writing a byte, drops it (and a later look may trace again).

A runtime lock taken by timed retry is such a loop too, told without a trace: a Python
thread in a timed futex wait on a word inside the runtime's own state waits for the GIL
(sampling/gil.py), whose holder py-spy reads; its waker is that thread. The reading holds
while the holder stays put (not running, in the same call, no CPU) and the waiter in its
futex wait ("Runtime locks" in docs/quiescence.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from harness.sampling import gil, procfs
from harness.sampling.model import Snapshot, ThreadSample
from harness.sampling.polltrace import PollTrace, Tracing
from harness.sampling.waits import ThreadWait, Wait
from harness.vocab import WaitKind, WaitVia
from harness.watch import wakefacts

Key = tuple[int, int]
TRACE_S = 1.0
BUSY_CPU_S = 0.05  # CPU between two looks past which a loop computes, not polls
MAX_TRIES = 3  # traces of one thread in a run, at most (a loop that keeps changing its call)
PROBE_AGAIN_S = 2.0  # a runtime lock read again after this long, while it is not resolved
# the sleeps a retry loop re-arms between its tries (a timed sleep's `what`, quiescence.py)
SLEEPS = ("nanosleep", "clock_nanosleep")
# the syscall of the loop's sleep (its number): the arguments may differ from one sleep to
# the next (a timespec on the stack at another depth), the call does not
_Call = str


@dataclass(frozen=True)
class PollTarget:
    """What a polling loop waits on: the lock it keeps being refused, and its holders."""

    call: _Call  # the sleep it re-arms
    what: str
    on: str  # "lock:PATH"
    holders: tuple[int, ...]
    wchar: int | None  # its process's bytes written when traced (an effect ends the reading)
    file: tuple[str, int] = ("", 0)  # the locked file's (dev, inode): its holders re-read
    cpu: float = 0.0  # the thread's CPU time at the last look (a loop that computes is none)
    via: WaitVia = WaitVia.FILE_LOCK
    # a runtime lock's holder, the thread: its call and CPU time when read (it must stay put)
    owner: Key | None = None
    owner_call: str = ""
    owner_cpu: float = 0.0


def lock_target(
    pid: int,
    found: PollTrace,
    holders_of: Callable[[str, int], list[int] | None],
    target_of: Callable[[int, int], str | None],
) -> tuple[str, str, tuple[int, ...], tuple[str, int]] | None:
    """(words, path, holders, (dev, inode)) of the one lock a trace shows the loop refused
    on, when the loop does nothing but sleep and look; None otherwise. `holders_of(dev,
    inode)`: the pids holding a lock on that file (None: unreadable)."""
    if not found.trylocks or not found.only_checks():
        return None
    fds = {fd for fd, _, _ in found.trylocks}
    if len(fds) != 1:
        return None  # several locks tried: no one thing it waits on
    (fd,) = fds
    # the path the loop opened that fd on (it may open, try and close each time), else the
    # fd as it stands
    path = found.opened.get(fd) or target_of(pid, fd)
    if path is None:
        return None
    if not path.startswith("/"):
        try:
            path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
        except OSError:
            return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    held = holders_of(wakefacts.dev_words(st.st_dev), st.st_ino)
    if not held:
        return None  # free now, or unreadable: the next try may succeed
    (_, call, command), tries = found.trylocks.most_common(1)[0]
    every = f" every ~{found.seconds / tries:.2f}s" if tries > 1 else ""
    who = ", ".join(map(str, sorted(set(held))[:4]))
    what = (
        f"retries a lock on {path}{every} ({call} {command} → refused), held by pid {who}: "
        "a polling loop that waits on the lock"
    )
    return what, path, tuple(sorted(set(held))), (wakefacts.dev_words(st.st_dev), st.st_ino)


def _still_held(
    target: PollTarget,
    threads: Mapping[Key, ThreadSample],
    held: dict[tuple[str, int], tuple[int, ...]],
) -> bool:
    """The lock is held as when it was read: a file lock by the same holders (`held`: the
    holders read at this look, per file), a runtime lock by a holder that has not moved (not
    running, in the same call, no CPU to speak of)."""
    if target.owner is not None:
        owner = threads.get(target.owner)
        return (
            owner is not None
            and owner.state not in "RZX"
            and owner.syscall == target.owner_call
            and owner.cpu_time - target.owner_cpu <= BUSY_CPU_S
        )
    if target.file not in held:
        held[target.file] = tuple(sorted(set(_lock_holders(*target.file) or [])))
    return held[target.file] == target.holders


def _lock_holders(dev: str, inode: int) -> list[int] | None:
    table = wakefacts.read_locks()
    if table is None:
        return None
    return [
        lk.pid
        for lk in table
        if not lk.blocked and (lk.dev, lk.inode) == (dev, inode) and lk.pid > 0
    ]


def _wchar(pid: int) -> int | None:
    text = procfs.read_proc(f"/proc/{pid}/io") or ""
    for line in text.splitlines():
        if line.startswith("wchar:"):
            value = line.split()[1]
            return int(value) if value.isdigit() else None
    return None


@dataclass
class PollLoops:
    """The polling loops of one run: the trace under way, and what each traced loop waits
    on (None: traced, nothing it waits on could be told)."""

    found: dict[Key, PollTarget | None] = field(default_factory=dict)
    _calls: dict[Key, _Call] = field(default_factory=dict)  # the call each was traced in
    _tracing: tuple[Key, _Call, Tracing] | None = None
    traces: int = 0  # traces taken (for the cost figures)
    probes: int = 0  # runtime locks read (py-spy)
    # threads whose timed futex wait was read as a possible runtime lock: when last (the
    # look's time) and how often
    _probed: dict[Key, tuple[float, int]] = field(default_factory=dict)
    _tries: dict[Key, int] = field(default_factory=dict)  # traces per thread, at most MAX_TRIES

    @property
    def busy(self) -> bool:
        """A trace is under way or a reading stands: the next look must see to it."""
        return self._tracing is not None or any(t is not None for t in self.found.values())

    @property
    def tracer(self) -> int | None:
        """The pid of the trace under way, if any."""
        return self._tracing[2].pid if self._tracing is not None else None

    def candidates(
        self, snap: Snapshot, timed: Collection[Key], withdrawn: Collection[Key]
    ) -> set[Key]:
        """The threads of `timed` resolved already, a trace may still be taken of (a main
        thread or one withdrawn, not traced in its current loop, under MAX_TRIES), or whose
        wait may still be read as a runtime lock (a Python process's): while there are, the
        watch loop reads the facts that decide whether to trace or read."""
        python = {p.pid for p in snap.processes if p.is_python}
        return {
            k
            for k in timed
            if self.found.get(k) is not None
            or (
                k not in self.found
                and (
                    ((k[0] == k[1] or k in withdrawn) and self._tries.get(k, 0) < MAX_TRIES)
                    or (k[0] in python and self._may_probe(k, snap.t))
                )
            )
        }

    def keys(self) -> set[Key]:
        """The loops resolved to a lock."""
        return {k for k, t in self.found.items() if t is not None}

    def targets(self) -> dict[Key, PollTarget]:
        return {k: t for k, t in self.found.items() if t is not None}

    def look(
        self,
        snap: Snapshot,
        waits: Mapping[Key, Wait],
        tree: Sequence[int],
        withdrawn: Collection[Key] = (),
    ) -> None:
        """One look: drop the readings the look disproves, end a trace that has run its
        course, and start one on a loop worth it (every other thread blocked). Only a main
        thread, or one whose stack showed the program's own code (`withdrawn`), is traced:
        another thread's timed loop is a housekeeping candidate, whose evidence (its
        wake-ups) a tracer would blur."""
        threads = {(p.pid, t.tid): t for p in snap.processes for t in p.threads}
        held: dict[tuple[str, int], tuple[int, ...]] = {}
        for key, target in list(self.found.items()):
            th = threads.get(key)
            if th is None:
                del self.found[key]
                continue
            if target is not None:
                # the lock still held by the same holders (not by the loop: it got it), and
                # the loop not computing since the last look: else the reading is over
                busy = th.cpu_time - target.cpu > BUSY_CPU_S and target.cpu > 0
                if busy or not _still_held(target, threads, held):
                    del self.found[key]
                    continue
                self.found[key] = replace(target, cpu=th.cpu_time)
            asleep_elsewhere = th.state == "S" and th.syscall != self._calls.get(key)
            wrote = target is not None and _wchar(key[0]) != target.wchar
            if asleep_elsewhere and waits.get(key, Wait(WaitKind.RUNNING, "")).kind in (
                WaitKind.TREE,
                WaitKind.TIMED,
                WaitKind.OUTSIDE,
            ):
                del self.found[key]  # it waits on something else now: another loop, or none
            elif wrote:
                del self.found[key]  # it had an effect: not a loop around a check alone
        if self._tracing is not None:
            key, call, tracing = self._tracing
            if snap.t >= 0 and _elapsed(tracing) >= TRACE_S:
                self._tracing = None
                self._finish(key, call, tracing, tree)
            return
        python = {p.pid for p in snap.processes if p.is_python}
        holders: dict[int, gil.GilHolder | str] = {}  # each process's GIL, read once a look
        for key, w in waits.items():
            if key in self.found or w.kind is not WaitKind.TIMED or not w.idle:
                continue
            if self._tries.get(key, 0) >= MAX_TRIES:
                continue
            th = threads.get(key)
            if th is None or th.state != "S":
                continue
            others = [v for k, v in waits.items() if k != key]
            if not all(v.kind in _BLOCKED for v in others):
                continue  # something else runs or waits outside: no closed set to find
            call = th.syscall
            if key[0] in python and w.on.startswith("futex:") and self._may_probe(key, snap.t):
                # a runtime lock retried on a timer: told by reading, no trace (any thread)
                self._probed[key] = (snap.t, self._probed.get(key, (0.0, 0))[1] + 1)
                found = runtime_lock(key, th, w, threads, holders)
                if found is not None:
                    self.probes += 1
                    self._calls[key] = call
                    self.found[key] = found
                    continue
            if key[0] != key[1] and key not in withdrawn:
                continue
            if w.what not in SLEEPS:
                # a poll on fds or a lock with a timeout is no retry loop's sleep, and a
                # tracer's attach would interrupt it: its restart hides the call it continues
                continue
            tracing = Tracing(key[1])
            if tracing.error:
                tracing.close()
                self.found[key] = None
                continue
            self.traces += 1
            self._tries[key] = self._tries.get(key, 0) + 1
            self._tracing = (key, call, tracing)
            return

    def _may_probe(self, key: Key, t: float) -> bool:
        """A thread's wait is read as a runtime lock at most MAX_TRIES times a run, and
        PROBE_AGAIN_S apart (the holder may have been on its way to let go)."""
        last, tries = self._probed.get(key, (-PROBE_AGAIN_S, 0))
        return tries < MAX_TRIES and t - last >= PROBE_AGAIN_S

    def judge(
        self,
        snap: Snapshot,
        waits: list[tuple[ThreadWait, Wait]],
        withdrawn: Collection[Key],
        tools: set[int],
    ) -> list[tuple[ThreadWait, Wait]]:
        """One look (`look`), the tracer's pid put into `tools` (the harness's own children,
        never the run's), and the waits with the resolved loops substituted."""
        keyed = {(tw.pid, tw.tid): w for tw, w in waits}
        self.look(snap, keyed, [p.pid for p in snap.processes], withdrawn)
        if self.tracer is not None:
            tools.add(self.tracer)
        return substitute(snap, waits, self.targets())

    def _finish(self, key: Key, call: _Call, tracing: Tracing, tree: Sequence[int]) -> None:
        found = tracing.finish()
        self._calls[key] = call
        if isinstance(found, str):
            self.found[key] = None
            return
        told = lock_target(key[0], found, _lock_holders, procfs.fd_target)
        if told is None or not set(told[2]) <= set(tree):
            self.found[key] = None  # no lock, or a holder outside the run
            return
        what, path, holders, file = told
        target = PollTarget(call, what, f"lock:{path}", holders, _wchar(key[0]), file)
        self.found[key] = target

    def close(self) -> None:
        if self._tracing is not None:
            self._tracing[2].close()
            self._tracing = None


_BLOCKED = (WaitKind.TREE, WaitKind.DONE, WaitKind.HOUSEKEEPING, WaitKind.TIMED)


def _elapsed(tracing: Tracing) -> float:
    return time.monotonic() - tracing.started


def as_wait(target: PollTarget) -> Wait:
    """The loop's wait, as the lock it polls: on the tree, its holders its wakers."""
    return Wait(
        WaitKind.TREE,
        target.what,
        on=target.on,
        peers=target.holders,
        wakers=target.holders,
        owners=() if target.owner is None else (target.owner,),
        resolved=True,
        via=target.via,
    )


def runtime_lock(
    key: Key,
    th: ThreadSample,
    w: Wait,
    threads: Mapping[Key, ThreadSample],
    holders: dict[int, gil.GilHolder | str],
) -> PollTarget | None:
    """The GIL as what a Python thread's timed futex wait waits on: the word lies inside the
    runtime's state and another thread of its process, not running, holds the GIL (read once
    a look per process into `holders`); None otherwise."""
    pid, tid = key
    try:
        word = int(w.on.split(":", 1)[1], 16)
    except ValueError:
        return None
    state = gil.runtime_state(pid)
    if state is None or not state[0] <= word < state[1]:
        return None
    if pid not in holders:
        holders[pid] = gil.gil_holder(pid)
    holder = holders[pid]
    if isinstance(holder, str) or holder.tid is None or holder.tid == tid:
        return None
    owner = threads.get((pid, holder.tid))
    if owner is None or owner.state in "RZX":
        return None  # it runs: the GIL changes hands as it should
    name = f" ({holder.name})" if holder.name else ""
    what = (
        f"waits for the GIL, held by tid {holder.tid}{name}: a timed wait on the runtime's "
        "state re-armed every few ms for as long as the holder keeps it"
    )
    return PollTarget(
        th.syscall,
        what,
        f"gil:{pid}",
        (pid,),
        _wchar(pid),
        cpu=th.cpu_time,
        via=WaitVia.RUNTIME_LOCK,
        owner=(pid, holder.tid),
        owner_call=owner.syscall,
        owner_cpu=owner.cpu_time,
    )


def substitute(
    snap: Snapshot, waits: list[tuple[ThreadWait, Wait]], loops: Mapping[Key, PollTarget]
) -> list[tuple[ThreadWait, Wait]]:
    """The waits with each resolved polling loop's wait turned into the lock it polls, at a
    look that finds it asleep in its loop or between two of its wake-ups (runnable)."""
    if not loops:
        return waits
    threads = {(p.pid, t.tid): t for p in snap.processes for t in p.threads}
    out = []
    for tw, w in waits:
        key = (tw.pid, tw.tid)
        target, th = loops.get(key), threads.get(key)
        in_loop = th is not None and (
            th.state == "R" or (target is not None and th.syscall == target.call)
        )
        if target is not None and in_loop and w.kind in _SUBSTITUTED:
            w = as_wait(target)
            tw = w.recorded(*key)
        out.append((tw, w))
    return out


_SUBSTITUTED = (WaitKind.TIMED, WaitKind.RUNNING, WaitKind.TREE)
