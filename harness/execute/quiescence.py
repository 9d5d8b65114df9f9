"""The quiescence rule, as pure functions over /proc snapshots: is every thread of the tree
blocked on the tree itself, and has nothing moved since the last look? Such a tree cannot
wake up on its own: it is deadlocked, and says so long before a startup or stall window
would. The rule is written down in docs/quiescence.md; the watch loop (`watchloop`) feeds
it, and it is tested over hand-made snapshots, without processes.

Conservative by construction: anything not proven to wait on the tree (a timed wait, disk,
a socket, a tty, poll/select/epoll, an unreadable syscall, an unknown architecture) makes
the tree not quiescent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.sampling.model import ProcessSample, Snapshot, ThreadSample, ThreadWait
from harness.vocab import WaitKind

# what a thread waits on
# the words of vocab.WaitKind, named here as the rule reads them (docs/quiescence.md):
TREE = WaitKind.TREE  # only the tree can end it: an untimed futex wait, a child, a tree pipe
TIMED = WaitKind.TIMED  # it wakes up by itself: a sleep, a futex wait with a timeout
OUTSIDE = WaitKind.OUTSIDE  # disk, sockets, ttys, a pipe written from outside, poll/select
RUNNING = WaitKind.RUNNING  # on a CPU, runnable, or in a syscall that does not block
UNKNOWN = WaitKind.UNKNOWN  # cannot tell (unreadable, unknown architecture, 32-bit process)
DONE = WaitKind.DONE  # an exited thread (zombie): waits on nothing

# ---------------------------------------------------------------- syscall numbers

# (name, x86_64, aarch64): the syscalls the rule reads, and common blocking ones so that a
# report names them. aarch64 uses the asm-generic numbers and has no poll, select, pause
# or epoll_wait.
_SYSCALLS: tuple[tuple[str, int, int | None], ...] = (
    ("read", 0, 63),
    ("readv", 19, 65),
    ("write", 1, 64),
    ("writev", 20, 66),
    ("futex", 202, 98),
    ("futex_waitv", 449, 449),
    ("wait4", 61, 260),
    ("waitid", 247, 95),
    ("nanosleep", 35, 101),
    ("clock_nanosleep", 230, 115),
    ("restart_syscall", 219, 128),
    ("ppoll", 271, 73),
    ("pselect6", 270, 72),
    ("epoll_pwait", 281, 22),
    ("epoll_pwait2", 441, 441),
    ("recvfrom", 45, 207),
    ("recvmsg", 47, 212),
    ("accept", 43, 202),
    ("accept4", 288, 242),
    ("connect", 42, 203),
    ("sendto", 44, 206),
    ("sendmsg", 46, 211),
    ("rt_sigsuspend", 130, 133),
    ("rt_sigtimedwait", 128, 137),
    ("sched_yield", 24, 124),
    ("io_getevents", 208, 4),
    ("io_uring_enter", 426, 426),
    ("flock", 73, 32),
    ("fcntl", 72, 25),
    ("semop", 65, 193),
    ("semtimedop", 220, 192),
    ("msgrcv", 70, 188),
    ("ioctl", 16, 29),
    ("openat", 257, 56),
    ("exit_group", 231, 94),
    ("clone", 56, 220),
    ("clone3", 435, 435),
    ("mmap", 9, 222),
    ("poll", 7, None),
    ("select", 23, None),
    ("pause", 34, None),
    ("epoll_wait", 232, None),
)


@dataclass(frozen=True)
class SyscallTable:
    arch: str
    names: Mapping[int, str]

    def name(self, number: int) -> str:
        return self.names.get(number, f"#{number}")


X86_64 = SyscallTable("x86_64", {x86: name for name, x86, _ in _SYSCALLS})
AARCH64 = SyscallTable("aarch64", {arm: name for name, _, arm in _SYSCALLS if arm is not None})
_MACHINES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def table_for(machine: str) -> SyscallTable | None:
    """The syscall numbers of `platform.machine()`, or None (quiescence is then off)."""
    return _MACHINES.get(machine.lower())


def syscall_name(th: ThreadSample, table: SyscallTable | None) -> str:
    """ "futex", "running", "" (unreadable), "-1" (blocked outside a syscall), "#N"."""
    if table is None or not th.syscall.isdigit():
        return th.syscall
    return table.name(int(th.syscall))


# ---------------------------------------------------------------- one thread

# futex(2): the command is the op without FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME
# (256). These block; for each, argument 4 (index 3) is the timeout pointer, NULL = forever.
# glibc's untimed waits (mutex, condvar, semaphore, join) pass NULL; its timed ones pass an
# absolute time with FUTEX_WAIT_BITSET (FUTEX_CLOCK_REALTIME for CLOCK_REALTIME waits).
_FUTEX_WAITS = {
    0: "FUTEX_WAIT",
    6: "FUTEX_LOCK_PI",
    9: "FUTEX_WAIT_BITSET",
    11: "FUTEX_WAIT_REQUEUE_PI",
    13: "FUTEX_LOCK_PI2",
}
_FUTEX_FLAGS = 128 | 256
_WNOHANG = 1
_P_PID = 1
_PIPE = re.compile(r"^pipe:\[(\d+)\]$")


@dataclass
class TreeFacts:
    """What the threads alone do not say, read by the watch loop only when the threads look
    blocked: what a read waits on, who can write to a pipe, who may get a timer signal."""

    fds: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, fd) → readlink
    writers: dict[int, list[int]] = field(default_factory=dict)  # pipe inode → tree pids
    outside_writers: dict[int, list[int]] = field(default_factory=dict)  # → other pids
    timers: dict[int, str] = field(default_factory=dict)  # pid → "catches SIGALRM", ...
    compat: set[int] = field(default_factory=set)  # 32-bit processes


@dataclass(frozen=True)
class Wait:
    kind: WaitKind
    what: str
    fd: int | None = None  # a read on this fd, not looked at yet (needs TreeFacts)


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _futex(args: Sequence[int]) -> Wait:
    cmd = args[1] & ~_FUTEX_FLAGS & 0xFFFFFFFF
    name = _FUTEX_WAITS.get(cmd)
    if name is None:
        return Wait(RUNNING, f"futex op {cmd} (not a wait)")
    if args[3]:
        return Wait(TIMED, f"futex wait with a timeout ({name})")
    return Wait(TREE, f"futex wait, no timeout ({name})")


def _children(snap: Snapshot, pid: int) -> list[int]:
    return [p.pid for p in snap.processes if p.ppid == pid]


def _wait_child(name: str, args: Sequence[int], proc: ProcessSample, snap: Snapshot) -> Wait:
    options = args[2] if name == "wait4" else args[3]
    if options & _WNOHANG:
        return Wait(RUNNING, f"{name} WNOHANG (not a wait)")
    children = _children(snap, proc.pid)
    target: int | None = None
    if name == "wait4" and _signed32(args[0]) > 0:
        target = _signed32(args[0])
    elif name == "waitid" and args[0] == _P_PID:
        target = int(args[1])
    if target is not None:
        if target in children:
            return Wait(TREE, f"{name} for child {target} (in the tree)")
        return Wait(OUTSIDE, f"{name} for pid {target}, not a child seen in the tree")
    if children:
        listed = ", ".join(map(str, children[:8]))
        return Wait(TREE, f"{name} for any child ({listed}: in the tree)")
    return Wait(OUTSIDE, f"{name} with no child seen in the tree")


def _read(name: str, fd: int, pid: int, facts: TreeFacts | None) -> Wait:
    target = facts.fds.get((pid, fd)) if facts is not None else None
    if facts is None:
        return Wait(UNKNOWN, f"{name} on fd {fd}: not looked at", fd=fd)
    if target is None:
        return Wait(UNKNOWN, f"{name} on fd {fd}: unreadable")
    m = _PIPE.match(target)
    if m is None:
        return Wait(OUTSIDE, f"{name} on fd {fd} ({target})")
    ino = int(m.group(1))
    outside = facts.outside_writers.get(ino, [])
    if outside:
        return Wait(OUTSIDE, f"{name} on pipe {ino}: writer outside the tree (pid {outside[0]})")
    inside = facts.writers.get(ino, [])
    if not inside:
        return Wait(OUTSIDE, f"{name} on pipe {ino}: no writer in the tree")
    return Wait(TREE, f"{name} on pipe {ino}, written only by the tree (pid {inside[0]})")


def thread_wait(
    snap: Snapshot,
    proc: ProcessSample,
    th: ThreadSample,
    table: SyscallTable | None,
    facts: TreeFacts | None = None,
) -> Wait:
    """What one thread waits on, by the rule of docs/quiescence.md."""
    if th.state in ("Z", "X"):
        return Wait(DONE, "exited")
    if th.state == "D":
        return Wait(OUTSIDE, f"uninterruptible sleep (state D, wchan {th.wchan or '?'})")
    if th.state in ("T", "t"):
        return Wait(OUTSIDE, f"stopped (state {th.state})")
    if th.state == "R" or th.syscall == "running":
        return Wait(RUNNING, "running")
    if th.state != "S":
        return Wait(UNKNOWN, f"state {th.state}")
    if table is None:
        return Wait(UNKNOWN, "syscall numbers of this architecture are unknown")
    if facts is not None and proc.pid in facts.compat:
        return Wait(UNKNOWN, "32-bit process (compat syscall numbers)")
    if not th.syscall.isdigit() or len(th.syscall_args) < 6:
        what = "outside a syscall" if th.syscall == "-1" else "syscall unreadable"
        return Wait(UNKNOWN, f"sleeping, {what}")
    name = table.name(int(th.syscall))
    args = th.syscall_args
    if name == "futex":
        return _futex(args)
    if name == "futex_waitv":
        if args[3]:
            return Wait(TIMED, "futex_waitv with a timeout")
        return Wait(TREE, "futex_waitv, no timeout")
    if name in ("nanosleep", "clock_nanosleep"):
        return Wait(TIMED, name)
    if name == "restart_syscall":
        return Wait(TIMED, "restart_syscall (an interrupted timed wait)")
    if name in ("wait4", "waitid"):
        return _wait_child(name, args, proc, snap)
    if name in ("read", "readv"):
        return _read(name, int(args[0]), proc.pid, facts)
    return Wait(OUTSIDE, name)  # poll, select, epoll, recv, accept, pause, sigwait, ...


# ---------------------------------------------------------------- the tree


def tree_waits(
    snap: Snapshot, table: SyscallTable | None, facts: TreeFacts | None = None
) -> list[tuple[ThreadWait, Wait]]:
    """Every thread of the snapshot with what it waits on."""
    out = []
    for proc in snap.processes:
        timer = facts.timers.get(proc.pid, "") if facts is not None else ""
        for th in proc.threads:
            w = thread_wait(snap, proc, th, table, facts)
            if w.kind == TREE and timer:  # a timer signal may end the wait
                w = Wait(TIMED, f"{w.what}, but the process {timer}")
            out.append((ThreadWait(proc.pid, th.tid, w.kind, w.what), w))
    return out


def is_blocked(waits: Sequence[tuple[ThreadWait, Wait]]) -> bool:
    """Every live thread waits on the tree (and there is at least one)."""
    kinds = [w.kind for _, w in waits]
    return TREE in kinds and all(k in (TREE, DONE) for k in kinds)


def needs_facts(waits: Sequence[tuple[ThreadWait, Wait]]) -> list[tuple[int, int]]:
    """(pid, fd) of the reads to look at when nothing else stands in the way, else []."""
    pending = [(tw.pid, w.fd) for tw, w in waits if w.fd is not None]
    others = [w for _, w in waits if w.fd is None]
    if not pending or not all(w.kind in (TREE, DONE) for w in others):
        return []
    return pending


def _threads(snap: Snapshot) -> dict[tuple[int, int], ThreadSample]:
    return {(p.pid, t.tid): t for p in snap.processes for t in p.threads if t.state not in "ZX"}


def woke(prev: Snapshot, cur: Snapshot, cpu_slack: float = 0.0, runs: bool = True) -> str | None:
    """Why `cur` shows the tree moved since `prev` (None: nothing moved). `cpu_slack` and
    `runs=False` forgive what a tracer's attach costs (the confirmation after a dump)."""
    before, after = _threads(prev), _threads(cur)
    if {p.pid for p in prev.processes} != {p.pid for p in cur.processes}:
        return "a process started or exited"
    if before.keys() != after.keys():
        return "a thread started or exited"
    for key, a in after.items():
        b = before[key]
        if a.cpu_time - b.cpu_time > cpu_slack:
            return f"tid {key[1]} used {a.cpu_time - b.cpu_time:.2f}s of CPU"
        if runs and a.runs is not None and b.runs is not None and a.runs != b.runs:
            return f"tid {key[1]} was scheduled {a.runs - b.runs} time(s)"
        if (a.state, a.syscall, a.syscall_args) != (b.state, b.syscall, b.syscall_args):
            return f"tid {key[1]} changed what it waits on"
    return None


def advance(
    since: float | None,
    prev: Snapshot | None,
    cur: Snapshot,
    blocked: bool,
    output_at: float | None = None,
) -> float | None:
    """The start of the quiet run after `cur` (seconds, the snapshots' clock), given the run's
    start after `prev`: None while not blocked; restarts at `cur` when anything moved or the
    tree wrote output since `prev`."""
    if not blocked:
        return None
    if since is None or prev is None:
        return cur.t
    if woke(prev, cur) is not None or (output_at is not None and output_at > prev.t):
        return cur.t
    return since


def quiet_since(
    snapshots: Sequence[Snapshot],
    table: SyscallTable | None,
    facts: Sequence[TreeFacts | None] | None = None,
    output_at: float | None = None,
) -> float | None:
    """Since when the tree has been quiescent, over a run of snapshots (oldest first), with
    each snapshot's facts; None when it is not quiescent at the last one."""
    since: float | None = None
    prev: Snapshot | None = None
    for i, snap in enumerate(snapshots):
        f = facts[i] if facts is not None else None
        since = advance(since, prev, snap, is_blocked(tree_waits(snap, table, f)), output_at)
        prev = snap
    return since
