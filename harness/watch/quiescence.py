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

from collections.abc import Collection, Sequence
from dataclasses import replace

from harness.sampling.model import ProcessSample, Snapshot, ThreadSample
from harness.sampling.waits import (
    FUTEX_PRIVATE_FLAG,
    FUTEX_WAITS,
    Deadline,
    ThreadWait,
    Wait,
    futex_cmd,
)
from harness.vocab import WaitKind, WaitVia
from harness.watch.fdwaits import POLLS, TreeFacts, fd_wait, poll_wait, rw_wait
from harness.watch.housekeeping import Look, candidate, housekeepers
from harness.watch.restarts import RESTARTED, Calls, continued
from harness.watch.syscalls import AARCH64, X86_64, SyscallTable, syscall_name, table_for

__all__ = [
    "AARCH64",
    "RESTARTED",
    "X86_64",
    "Calls",
    "SyscallTable",
    "TreeFacts",
    "Wait",
    "continued",
    "syscall_name",
    "table_for",
]

# what a thread waits on
# the words of vocab.WaitKind, named here as the rule reads them (docs/quiescence.md):
TREE = WaitKind.TREE  # only the tree can end it: an untimed futex wait, a child, a tree pipe
TIMED = WaitKind.TIMED  # it wakes up by itself: a sleep, a futex wait with a timeout
OUTSIDE = WaitKind.OUTSIDE  # disk, sockets, ttys, a pipe written from outside, poll/select
RUNNING = WaitKind.RUNNING  # on a CPU, runnable, or in a syscall that does not block
UNKNOWN = WaitKind.UNKNOWN  # cannot tell (unreadable, unknown architecture, 32-bit process)
DONE = WaitKind.DONE  # an exited thread (zombie): waits on nothing
HOUSEKEEPING = WaitKind.HOUSEKEEPING  # a periodic timed wake-up that changes nothing

# ---------------------------------------------------------------- one thread

_WNOHANG = 1
_P_PID = 1


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


# fcntl(2) commands that wait for a lock: F_SETLKW (POSIX), F_OFD_SETLKW (open file description)
_F_SETLKW, _F_OFD_SETLKW = 7, 38
# the socket calls that wait like a read or a write on their fd
_SOCKET_READS = ("recvfrom", "recvmsg")
_SOCKET_WRITES = ("sendto", "sendmsg")


def _late(key: tuple[int, int], facts: TreeFacts | None) -> Deadline | None:
    """The deadline of the thread's timed wait when it lies past the run's wall limit."""
    found = facts.deadlines.get(key) if facts is not None else None
    return found if found is not None and found.past else None


def _timed(what: str, facts: TreeFacts | None, **kw: object) -> Wait:
    """A timed wait not past the run's limit; before the facts are read, it asks for them
    (its deadline may lie past the limit)."""
    pending = "deadline" if facts is None else ""
    return Wait(TIMED, what, idle=True, pending=pending, **kw)  # type: ignore[arg-type]


def _futex(args: Sequence[int], key: tuple[int, int], facts: TreeFacts | None) -> Wait:
    """A futex wait, with who could wake it (the wake graph): a private futex only its own
    process (FUTEX_PRIVATE_FLAG: the kernel keys it on the address space), a shared one the
    processes mapping its page; a pthread mutex only its owner. A timed wait whose deadline
    lies past the run's limit is judged as untimed, its deadline said."""
    cmd = futex_cmd(args[1])
    name = FUTEX_WAITS.get(cmd)
    if name is None:
        return Wait(RUNNING, f"futex op {cmd} (not a wait)")
    on, via = f"futex:{args[0]:#x}", WaitVia.FUTEX
    late = _late(key, facts)
    if args[3] and late is None:
        return _timed(f"futex wait with a timeout ({name})", facts, on=on, via=via)
    wait = _futex_untimed(args, key, facts, name, on, via)
    if late is None:
        return wait
    what = (
        f"futex wait with a timeout ({name}){wait.what[len(f'futex wait, no timeout ({name})') :]}"
    )
    return replace(wait, what=f"{what}; {late.words()}", idle=True, late_s=late.left_s)


def _futex_untimed(
    args: Sequence[int],
    key: tuple[int, int],
    facts: TreeFacts | None,
    name: str,
    on: str,
    via: WaitVia,
) -> Wait:
    what = f"futex wait, no timeout ({name})"
    pid = key[0]
    private = bool(args[1] & FUTEX_PRIVATE_FLAG)  # the kernel keys it on the address space
    owner = facts.owners.get(key) if facts is not None else None
    if owner is not None:
        what += f": a pthread mutex held by tid {owner[1]}"
        return Wait(
            TREE,
            what,
            on=on,
            wakers=(owner[0],),
            owners=(owner,),
            resolved=True,
            via=WaitVia.MUTEX,
            private=private,
        )
    if private:
        return Wait(TREE, what, on=on, wakers=(pid,), resolved=True, via=via, private=True)
    shared = facts.futex_wakers.get((pid, args[0])) if facts is not None else None
    told = facts.futex_what.get((pid, args[0])) if facts is not None else None
    if told:
        what = f"{what}: {told}"
    if shared is not None:
        return Wait(TREE, what, on=on, wakers=shared, resolved=True, via=via)
    return Wait(TREE, what, on=on, via=via)


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
    ex = WaitVia.EXIT
    if target is not None:
        on = f"child:{target}"
        if target in children:
            what = f"{name} for child {target} (in the tree)"
            kid = (target,)
            return Wait(TREE, what, on=on, peers=kid, wakers=kid, resolved=True, via=ex)
        what = f"{name} for pid {target}, not a child seen in the tree"
        return Wait(OUTSIDE, what, on=on, via=ex)
    if children:
        listed = ", ".join(map(str, children[:8]))
        what = f"{name} for any child ({listed}: in the tree)"
        kids = tuple(children)
        return Wait(TREE, what, on="child:any", peers=kids, wakers=kids, resolved=True, via=ex)
    return Wait(OUTSIDE, f"{name} with no child seen in the tree", on="child:any", via=ex)


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
        return _futex(args, (proc.pid, th.tid), facts)
    key = (proc.pid, th.tid)
    late = _late(key, facts)
    if name == "futex_waitv":
        if args[3] and late is None:
            return _timed("futex_waitv with a timeout", facts)
        if late is not None:  # its futexes' wakers are not read
            what = f"futex_waitv with a timeout; {late.words()}"
            return Wait(TREE, what, idle=True, late_s=late.left_s)
        return Wait(TREE, "futex_waitv, no timeout")  # its futexes' wakers are not read
    if name in ("nanosleep", "clock_nanosleep"):
        if late is not None:
            # nothing but its timer ends a sleep (a timer signal aside: tree_waits): no waker
            what = f"{name}: {late.words()}"
            return Wait(TREE, what, idle=True, resolved=True, late_s=late.left_s)
        return _timed(name, facts)
    if name == "restart_syscall":  # not seen before the interruption (`continued`)
        # timed (its timeout is not shown), but not known to be a timer of its own: it may
        # continue a poll with no timeout, so neither idle nor a housekeeping candidate
        return Wait(TIMED, "restart_syscall (an interrupted wait, not seen before)")
    if name in ("wait4", "waitid"):
        return _wait_child(name, args, proc, snap)
    if name in ("read", "readv", "write", "writev"):
        return rw_wait(name, int(args[0]), proc.pid, name.startswith("read"), facts)
    if name in POLLS:
        wait = poll_wait(name, args, proc.pid, th.tid, facts, late=late is not None)
        if late is not None and wait.kind == TREE:
            return replace(wait, what=f"{wait.what}; {late.words()}", late_s=late.left_s)
        if wait.kind == TIMED and facts is None:
            return replace(wait, pending="deadline")
        return wait
    if name in _SOCKET_READS or name in _SOCKET_WRITES:
        return rw_wait(name, int(args[0]), proc.pid, name in _SOCKET_READS, facts)
    if name == "flock" or (name == "fcntl" and args[1] in (_F_SETLKW, _F_OFD_SETLKW)):
        return fd_wait(name, int(args[0]), proc.pid, facts)
    return Wait(OUTSIDE, name)  # accept, connect, openat, pause, sigwait, semop, ...


# ---------------------------------------------------------------- the tree


def tree_waits(
    snap: Snapshot,
    table: SyscallTable | None,
    facts: TreeFacts | None = None,
    restarted: Collection[tuple[int, int]] = (),
) -> list[tuple[ThreadWait, Wait]]:
    """Every thread of the snapshot with what it waits on (`restarted`: the threads
    `continued` judged as the syscall they were seen in before restart_syscall)."""
    out = []
    for proc in snap.processes:
        for th in proc.threads:
            w = thread_wait(snap, proc, th, table, facts)
            if (proc.pid, th.tid) in restarted:
                w = replace(w, what=f"{w.what}; {RESTARTED}")
            # a timer's signal may end the wait, where it can be delivered to this thread
            timer = facts.signalled.get((proc.pid, th.tid), "") if facts is not None else ""
            if w.kind == TREE and timer:
                # timed, but not asleep on a timer of its own: not idle (neither the `idle`
                # mechanism nor a housekeeping candidate); a naturally timed wait stays idle
                w = Wait(
                    TIMED,
                    f"{w.what}, but the process {timer}, delivered to this thread",
                    on=w.on,
                    peers=w.peers,
                    via=w.via,
                    private=w.private,
                )
            out.append((w.recorded(proc.pid, th.tid), w))
    return out


# the waits of a tree that is blocked on itself: nothing there runs the program's code
BLOCKED_KINDS = (TREE, DONE, HOUSEKEEPING)


def is_blocked(waits: Sequence[tuple[ThreadWait, Wait]]) -> bool:
    """Every live thread waits on the tree or is housekeeping, and at least one waits on the
    tree (a tree of housekeeping threads alone is idle, not deadlocked)."""
    kinds = [w.kind for _, w in waits]
    return TREE in kinds and all(k in BLOCKED_KINDS for k in kinds)


def needs_facts(
    waits: Sequence[tuple[ThreadWait, Wait]],
    withdrawn: Collection[tuple[int, int]] = (),
    late: Collection[tuple[int, int]] = (),
) -> bool:
    """Nothing but facts stands in the way: every thread waits on the tree, is done, is a
    housekeeping candidate (`housekeeping.candidate`: not a main thread, not withdrawn),
    waits on fds not looked at yet, or is in a timed wait whose deadline a light read found
    past the run's limit (`late`), and at least one waits on the tree or on such fds. Only
    then does the watch loop read the facts (a Pool whose workers sleep in their main
    threads costs no fd scan)."""

    def pending(tw: ThreadWait, w: Wait) -> bool:
        # a timed wait asks for the facts only when its deadline was found past the limit
        return bool(w.pending) and (w.pending != "deadline" or (tw.pid, tw.tid) in late)

    if not any(w.kind == TREE or pending(tw, w) for tw, w in waits):
        return False
    return all(
        w.kind in (TREE, DONE) or candidate((tw.pid, tw.tid), w, withdrawn) or pending(tw, w)
        for tw, w in waits
    )


def pending_fds(waits: Sequence[tuple[ThreadWait, Wait]]) -> list[tuple[int, int]]:
    """(pid, fd) of the reads and writes whose fd is to be looked at."""
    return [(tw.pid, w.fd) for tw, w in waits if w.pending == "fd" and w.fd is not None]


def pending_locks(waits: Sequence[tuple[ThreadWait, Wait]]) -> list[tuple[int, int]]:
    """(pid, fd) of the file-lock waits (flock, fcntl F_SETLKW) whose holders are to be read."""
    return [(tw.pid, w.fd) for tw, w in waits if w.pending == "lock" and w.fd is not None]


def pending_polls(waits: Sequence[tuple[ThreadWait, Wait]]) -> list[tuple[int, int]]:
    """(pid, tid) of the polls whose fds are to be read."""
    return [(tw.pid, tw.tid) for tw, w in waits if w.pending == "poll"]


def mark_housekeeping(
    waits: Sequence[tuple[ThreadWait, Wait]], found: dict[tuple[int, int], str]
) -> list[tuple[ThreadWait, Wait]]:
    """The waits with the threads of `found` (key → why) turned HOUSEKEEPING."""
    out = []
    for tw, w in waits:
        why = found.get((tw.pid, tw.tid))
        if why is not None:
            w = Wait(
                HOUSEKEEPING, why, on=w.on, peers=w.peers, idle=True, via=w.via, private=w.private
            )
            tw = replace(tw, kind=HOUSEKEEPING, what=why, idle=True)
        out.append((tw, w))
    return out


def _threads(snap: Snapshot) -> dict[tuple[int, int], ThreadSample]:
    return {(p.pid, t.tid): t for p in snap.processes for t in p.threads if t.state not in "ZX"}


def woke(
    prev: Snapshot,
    cur: Snapshot,
    cpu_slack: float = 0.0,
    runs: bool = True,
    ignore: Collection[tuple[int, int]] = (),
) -> str | None:
    """Why `cur` shows the tree moved since `prev` (None: nothing moved). `cpu_slack` and
    `runs=False` forgive what a tracer's attach costs (the confirmation after a dump);
    the CPU and runs of the threads in `ignore` (housekeeping, whose own clause bounds
    them) are not compared, their state, syscall and arguments are."""
    before, after = _threads(prev), _threads(cur)
    if {p.pid for p in prev.processes} != {p.pid for p in cur.processes}:
        return "a process started or exited"
    if before.keys() != after.keys():
        return "a thread started or exited"
    for key, a in after.items():
        b = before[key]
        if key not in ignore:
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
    ignore: Collection[tuple[int, int]] = (),
) -> float | None:
    """The start of the quiet run after `cur` (seconds, the snapshots' clock), given the run's
    start after `prev`: None while not blocked; restarts at `cur` when anything moved or the
    tree wrote output since `prev` (`ignore`: housekeeping threads, as in `woke`)."""
    if not blocked:
        return None
    if since is None or prev is None:
        return cur.t
    if woke(prev, cur, ignore=ignore) is not None or (output_at is not None and output_at > prev.t):
        return cur.t
    return since


def judge(
    snap: Snapshot,
    table: SyscallTable | None,
    facts: TreeFacts | None,
    history: Sequence[Look] = (),
    io: dict[int, tuple[int, int]] | None = None,
    restarted: Collection[tuple[int, int]] = (),
    withdrawn: Collection[tuple[int, int]] = (),
) -> tuple[list[tuple[ThreadWait, Wait]], Look]:
    """One snapshot's waits by the whole rule, housekeeping included (`history`: the earlier
    looks, oldest first; `withdrawn`: threads never to excuse), and the look to append to
    the history."""
    waits = tree_waits(snap, table, facts, restarted)
    look = Look(snap, {(tw.pid, tw.tid): w for tw, w in waits}, io)
    found = housekeepers([*history, look], withdrawn)
    return (mark_housekeeping(waits, found) if found else waits), look


def quiet_since(
    snapshots: Sequence[Snapshot],
    table: SyscallTable | None,
    facts: Sequence[TreeFacts | None] | None = None,
    output_at: float | None = None,
    io: Sequence[dict[int, tuple[int, int]] | None] | None = None,
) -> float | None:
    """Since when the tree has been quiescent, over a run of snapshots (oldest first), with
    each snapshot's facts and I/O counters; None when it is not quiescent at the last one."""
    since: float | None = None
    prev: Snapshot | None = None
    history: list[Look] = []
    calls: Calls = {}
    for i, raw in enumerate(snapshots):
        f = facts[i] if facts is not None else None
        snap, calls, restarted = continued(raw, table, calls)
        waits, look = judge(snap, table, f, history, io[i] if io is not None else None, restarted)
        history.append(look)
        hk = [(tw.pid, tw.tid) for tw, _ in waits if tw.kind == HOUSEKEEPING]
        since = advance(since, prev, snap, is_blocked(waits), output_at, hk)
        prev = snap
    return since
