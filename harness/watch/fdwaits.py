"""What a wait on file descriptors waits on (docs/quiescence.md): a read, a write, or a
poll/select/epoll over fds, judged from the facts the watch loop reads about them
(`TreeFacts`): which processes, in the tree and outside it, hold each end of a pipe, and
which tree processes hold the other end of a socket. Pure: tested over hand-made facts.

A wait on fds is on the tree only when every process that could end it holds the other end
and is in the tree: a read on a pipe whose writers are all in the tree, a write on a full
pipe whose readers are all in the tree, a poll whose every fd is such a pipe (or a socket
whose peer is held only by the tree).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.sampling.waits import Deadline, Wait
from harness.vocab import WaitKind, WaitVia

_PIPE = re.compile(r"^pipe:\[(\d+)\]$")
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")
POLLIN, POLLPRI, POLLOUT = 0x1, 0x2, 0x4


@dataclass
class TreeFacts:
    """What the threads alone do not say, read by the watch loop only when the threads look
    blocked: what a read waits on, who holds each end of a pipe, who may get a timer signal,
    what a poll watches."""

    fds: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, fd) → readlink
    writers: dict[int, list[int]] = field(default_factory=dict)  # pipe inode → tree pids
    outside_writers: dict[int, list[int]] = field(default_factory=dict)  # → other pids
    readers: dict[int, list[int]] = field(default_factory=dict)  # pipe inode → tree pids
    outside_readers: dict[int, list[int]] = field(default_factory=dict)  # → other pids
    # a socket inode → the tree pids holding its peer, when the peer is held only by the
    # tree (a connected loopback TCP socket); absent: the peer is outside or unknown
    socket_peers: dict[int, list[int]] = field(default_factory=dict)
    # (pid, tid) → the (fd, events) a poll/select/epoll waits on; absent: unreadable
    polled: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)
    writable: set[tuple[int, int]] = field(default_factory=set)  # (pid, fd) open for writing
    timers: dict[int, str] = field(default_factory=dict)  # pid → "catches SIGALRM", ...
    # (pid, tid) → why a timer's signal may interrupt that thread's wait: the threads a
    # timer signal can be delivered to (not blocked by their mask; a process-directed one
    # goes to the main thread unless the main thread blocks it)
    signalled: dict[tuple[int, int], str] = field(default_factory=dict)
    # (pid, tid) → when its timed wait ends by itself (watch/deadlines.py)
    deadlines: dict[tuple[int, int], Deadline] = field(default_factory=dict)
    compat: set[int] = field(default_factory=set)  # 32-bit processes
    # the wake graph's facts (wakefacts.py) for fds that are neither pipes nor TCP sockets:
    # (pid, fd) → the tree pids that alone could end a wait on it (an eventfd's holders, a
    # pidfd's process, a lock's holders), and what it is; absent: outside or unknown
    fd_wakers: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    fd_what: dict[tuple[int, int], str] = field(default_factory=dict)
    timerfds: dict[tuple[int, int], bool] = field(default_factory=dict)  # (pid, fd) → armed
    # (pid, futex address) → the tree pids mapping a shared futex's page (none outside)
    futex_wakers: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    # (pid, futex address) → what the shared mapping of a futex is, in words
    futex_what: dict[tuple[int, int], str] = field(default_factory=dict)
    # (pid, tid) → the (pid, tid) owning the pthread mutex it waits for (sampling.locks)
    owners: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)


def pipe_inode(target: str) -> int | None:
    m = _PIPE.match(target)
    return int(m.group(1)) if m else None


def socket_inode(target: str) -> int | None:
    m = _SOCKET.match(target)
    return int(m.group(1)) if m else None


_ANON_VIA = {"anon_inode:[eventfd]": WaitVia.EVENTFD, "anon_inode:[pidfd]": WaitVia.EXIT}


def target_via(target: str) -> WaitVia:
    """What an fd is, from its readlink: a pipe, a socket, an eventfd, a pidfd (a process's
    exit), a path (a FIFO opened by name, a device)."""
    if _PIPE.match(target):
        return WaitVia.PIPE
    if _SOCKET.match(target):
        return WaitVia.SOCKET
    if target.startswith("/"):
        return WaitVia.FILE
    return _ANON_VIA.get(target, WaitVia.OTHER)


def _pipe_end(ino: int, reading: bool, facts: TreeFacts) -> tuple[list[int], list[int]]:
    """(tree pids, outside pids) at the other end of pipe `ino` for a reader or a writer."""
    if reading:
        return facts.writers.get(ino, []), facts.outside_writers.get(ino, [])
    return facts.readers.get(ino, []), facts.outside_readers.get(ino, [])


def rw_wait(name: str, fd: int, pid: int, reading: bool, facts: TreeFacts | None) -> Wait:
    """A read (readv) or write (writev) blocked on `fd` of `pid`."""
    if facts is None:
        return Wait(WaitKind.UNKNOWN, f"{name} on fd {fd}: not looked at", fd=fd, pending="fd")
    target = facts.fds.get((pid, fd))
    if target is None:
        return Wait(WaitKind.UNKNOWN, f"{name} on fd {fd}: unreadable")
    ino = pipe_inode(target)
    if ino is None:
        return _other_fd_wait(name, fd, pid, target, facts)
    on, end = f"pipe:[{ino}]", "writer" if reading else "reader"
    inside, outside = _pipe_end(ino, reading, facts)
    peers = tuple(sorted(inside))
    if outside:
        what = f"{name} on pipe {ino}: {end} outside the tree (pid {outside[0]})"
        return Wait(WaitKind.OUTSIDE, what, on=on, peers=peers, via=WaitVia.PIPE)
    if not inside:
        what = f"{name} on pipe {ino}: no {end} in the tree"
        return Wait(WaitKind.OUTSIDE, what, on=on, via=WaitVia.PIPE)
    if reading:
        what = f"{name} on pipe {ino}, written only by the tree (pid {inside[0]})"
    else:
        what = f"{name} to a full pipe {ino}, read only by the tree (pid {inside[0]})"
    pipe = WaitVia.PIPE
    return Wait(WaitKind.TREE, what, on=on, peers=peers, wakers=peers, resolved=True, via=pipe)


def _other_fd_wait(
    name: str, fd: int, pid: int, target: str, facts: TreeFacts, via: WaitVia | None = None
) -> Wait:
    """A read, write, recv or send on an fd that is not a pipe: on the tree when its other
    end is held only by the tree (a connected socket's peer, an eventfd's holders). `via`:
    what the wait is, when the call says more than the fd (a lock on a file)."""
    via = via or target_via(target)
    sock = socket_inode(target)
    if sock is not None and sock in facts.socket_peers:
        peers = tuple(sorted(facts.socket_peers[sock]))
        what = f"{name} on {target}, whose peer only the tree holds (pid {peers[0]})"
        return Wait(
            WaitKind.TREE, what, on=target, peers=peers, wakers=peers, resolved=True, via=via
        )
    wakers = facts.fd_wakers.get((pid, fd))
    told = facts.fd_what.get((pid, fd), target)
    if wakers is not None:
        what = f"{name} on fd {fd} ({told}), which only the tree can end"
        return Wait(
            WaitKind.TREE, what, on=target, peers=wakers, wakers=wakers, resolved=True, via=via
        )
    return Wait(WaitKind.OUTSIDE, f"{name} on fd {fd} ({told})", on=target, via=via)


def fd_wait(name: str, fd: int, pid: int, facts: TreeFacts | None) -> Wait:
    """A wait on one fd that is not a read or a write: a file lock (flock, fcntl F_SETLKW),
    ended by its holders; on the tree when every holder is in the tree."""
    if facts is None:
        what = f"{name} on fd {fd}: not looked at"
        return Wait(WaitKind.UNKNOWN, what, fd=fd, pending="lock", via=WaitVia.FILE_LOCK)
    target = facts.fds.get((pid, fd))
    if target is None:
        return Wait(WaitKind.UNKNOWN, f"{name} on fd {fd}: unreadable", via=WaitVia.FILE_LOCK)
    return _other_fd_wait(name, fd, pid, target, facts, WaitVia.FILE_LOCK)


# poll family: (name, timeout argument index, "int" (ms, < 0 forever) or "ptr" (NULL forever))
POLLS = {
    "poll": (2, "int"),
    "ppoll": (2, "ptr"),
    "select": (4, "ptr"),
    "pselect6": (4, "ptr"),
    "epoll_wait": (3, "int"),
    "epoll_pwait": (3, "int"),
    "epoll_pwait2": (3, "ptr"),
}


def poll_timed(name: str, args: Sequence[int]) -> bool:
    index, form = POLLS[name]
    value = args[index]
    if form == "ptr":
        return value != 0
    value &= 0xFFFFFFFF
    return value < 1 << 31  # a negative int: forever


def _fd_peers(pid: int, fd: int, events: int, facts: TreeFacts) -> tuple[str, list[int]] | str:
    """(what it is, tree pids at the other end) for one polled fd, or why it is not proven
    to be ended only by the tree."""
    target = facts.fds.get((pid, fd))
    if target is None:
        return f"fd {fd} unreadable"
    ino = pipe_inode(target)
    if ino is not None:
        peers: list[int] = []
        # a read end waits for its writers (data, or the last one closing); a write end for
        # its readers; an fd open both ways (or asked both ways) for both
        ends = []
        if events & (POLLIN | POLLPRI) or (pid, fd) not in facts.writable:
            ends.append(True)
        if events & POLLOUT or (pid, fd) in facts.writable:
            ends.append(False)
        for reading in ends:
            inside, outside = _pipe_end(ino, reading, facts)
            if outside:
                return f"fd {fd} ({target}): other end outside the tree (pid {outside[0]})"
            if not inside:
                return f"fd {fd} ({target}): other end not in the tree"
            peers += inside
        return target, peers
    sock = socket_inode(target)
    if sock is not None and sock in facts.socket_peers:
        return target, list(facts.socket_peers[sock])
    if (pid, fd) in facts.fd_wakers:
        return facts.fd_what.get((pid, fd), target), list(facts.fd_wakers[(pid, fd)])
    return f"fd {fd} ({facts.fd_what.get((pid, fd), target)}): not ended by the tree alone"


def poll_wait(
    name: str, args: Sequence[int], pid: int, tid: int, facts: TreeFacts | None, late: bool = False
) -> Wait:
    """poll/select/epoll: on the tree when every fd it watches has only the tree at its
    other end; then untimed is TREE, timed is TIMED and idle (a housekeeping candidate).
    `late`: its timeout ends it only after the run's limit (judged as untimed)."""
    timed = poll_timed(name, args) and not late
    form = "with a timeout" if timed or late else "no timeout"
    if facts is None:
        return Wait(WaitKind.OUTSIDE, f"{name} ({form}): fds not looked at", pending="poll")
    watched = facts.polled.get((pid, tid))
    if watched is None:
        return Wait(WaitKind.OUTSIDE, f"{name} ({form}): its fds cannot be read")
    if not watched:
        # no fd at all: a sleep written as a poll (select(0, NULL, NULL, NULL, &tv))
        if timed:
            return Wait(WaitKind.TIMED, f"{name} on no fd (a sleep)", idle=True)
        if late:  # a sleep written as a poll, past the run's limit: only its timer ends it
            return Wait(WaitKind.TREE, f"{name} on no fd (a sleep)", idle=True, resolved=True)
        return Wait(WaitKind.OUTSIDE, f"{name} on no fd, no timeout (only a signal ends it)")
    ons: list[str] = []
    vias: set[WaitVia] = set()
    peers: set[int] = set()
    for fd, events in watched:
        armed = facts.timerfds.get((pid, fd))
        if armed is not None:
            if armed:  # the timer ends the wait by itself: a timed poll
                timed, form = True, "a timerfd armed"
            continue  # a disarmed timerfd never fires: it wakes nothing
        found = _fd_peers(pid, fd, events, facts)
        if isinstance(found, str):
            return Wait(WaitKind.OUTSIDE, f"{name} ({form}): {found}")
        ons.append(found[0])
        peers.update(found[1])
        target = facts.fds.get((pid, fd))
        vias.add(target_via(target) if target is not None else WaitVia.OTHER)
    on = ",".join(dict.fromkeys(ons))
    what = f"{name} ({form}) on {len(watched)} fd(s), each with only the tree at the other end"
    kind = WaitKind.TIMED if timed else WaitKind.TREE
    wakers = tuple(sorted(peers))
    # one kind of fd (the sockets of an event loop, a Popen's pipes): the wait is that kind
    via = vias.pop() if len(vias) == 1 else WaitVia.POLL if vias else WaitVia.OTHER
    return Wait(
        kind, what, on=on, peers=wakers, idle=timed, wakers=wakers, resolved=not timed, via=via
    )
