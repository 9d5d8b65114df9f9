"""Reads from /proc the facts the quiescence rule needs beyond the threads themselves
(`fdwaits.TreeFacts`, docs/quiescence.md): the fd a read or write waits on, the fds a
poll/select/epoll watches (its pollfd array or fd sets, read from /proc/PID/mem; an epoll
instance's fds from /proc/PID/fdinfo), which processes hold each end of those pipes in the
tree and outside it, the tree's end of a loopback TCP connection, timer signals, and each
process's I/O counters. Read only when the threads alone say the tree may be blocked.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Collection, Iterable, Mapping, Sequence

from harness.sampling import procfs, timers
from harness.sampling.model import ProcessSample, Snapshot
from harness.watch import deadlines, wakefacts, wakeread
from harness.watch.fdwaits import POLLIN, POLLOUT, POLLPRI, TreeFacts, pipe_inode, socket_inode
from harness.watch.syscalls import SyscallTable

MAX_POLL_FDS = 1024  # a poll over more fds is not looked into (OUTSIDE)
# the scan of every process outside the tree for the tree's pipes and sockets is kept this
# long at most (and while the tree's processes stay the same): a fresh scan costs a readlink
# per fd of every process on the host. The confirmation after the stack dump scans afresh.
OUTSIDE_REFRESH_S = 2.0


def read_mem(pid: int, address: int, size: int) -> bytes | None:
    """`size` bytes of `pid`'s memory (same user, or a descendant where ptrace is scoped)."""
    if not address or size <= 0:
        return None
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.pread(fd, size, address)
    except (OSError, OverflowError):
        return None
    finally:
        os.close(fd)
    return data if len(data) == size else None


def _fd_set(pid: int, address: int, nfds: int, events: int) -> list[tuple[int, int]] | None:
    if not address:
        return []
    data = read_mem(pid, address, (nfds + 63) // 64 * 8)
    if data is None:
        return None
    bits = int.from_bytes(data, "little")
    return [(fd, events) for fd in range(nfds) if bits >> fd & 1]


def epoll_fds(pid: int, epfd: int) -> list[tuple[int, int]] | None:
    """(fd, events) an epoll instance watches (fdinfo `tfd:` lines), None if unreadable."""
    text = procfs.read_proc(f"/proc/{pid}/fdinfo/{epfd}", 65536)
    if text is None:
        return None
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "tfd:" and parts[2] == "events:":
            out.append((int(parts[1]), int(parts[3], 16)))
    return out


def polled_fds(pid: int, name: str, args: Sequence[int]) -> list[tuple[int, int]] | None:
    """(fd, events) a poll, select or epoll in this syscall waits on; None when unreadable."""
    if name in ("poll", "ppoll"):
        nfds = args[1]
        if nfds > MAX_POLL_FDS:
            return None
        data = read_mem(pid, args[0], nfds * 8) if nfds else b""
        if data is None:
            return None
        fds = struct.unpack(f"<{'ihh' * nfds}", data)
        return [(fds[i], fds[i + 1]) for i in range(0, len(fds), 3) if fds[i] >= 0]
    if name in ("select", "pselect6"):
        nfds = args[0]
        if nfds > MAX_POLL_FDS:
            return None
        out: list[tuple[int, int]] = []
        for address, events in ((args[1], POLLIN), (args[2], POLLOUT), (args[3], POLLPRI)):
            found = _fd_set(pid, address, nfds, events)
            if found is None:
                return None
            out += found
        return out
    if name.startswith("epoll"):
        return epoll_fds(pid, args[0] & 0xFFFFFFFF)
    return None


def _tcp_table(pid: int) -> dict[int, tuple[str, str, str]]:
    """Socket inode → (local, remote, state) of the process's network namespace."""
    out = {}
    for table in ("tcp", "tcp6"):
        text = procfs.read_proc(f"/proc/{pid}/net/{table}", 1 << 22) or ""
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) >= 10 and f[9].isdigit():
                out[int(f[9])] = (f[1], f[2], f[3])
    return out


class FactReader:
    """Reads TreeFacts for one snapshot. The scan of processes outside the tree (for pipe
    and socket holders) is kept while the tree's processes stay the same, for at most
    OUTSIDE_REFRESH_S; a pipe or socket not in it yet is scanned for at once (`reset`:
    scan afresh at the next read)."""

    def __init__(
        self, refresh_s: float = OUTSIDE_REFRESH_S, run_started: float = float("-inf")
    ) -> None:
        self._outside: dict[int, tuple[list[int], list[int]]] | None = None  # pipe → (w, r)
        self._outside_sockets: dict[str, list[int]] | None = None
        self._outside_maps: dict[tuple[str, int], list[int]] | None = None
        self.refresh_s = refresh_s
        # time.monotonic() when the run started (the watch loop's launch): a process older
        # than it cannot have inherited a page the run made
        self.run_started = run_started
        self._tree: frozenset[int] = frozenset()  # the tree the scan was kept for
        self._scanned_at: float | None = None  # the oldest scan kept (time.monotonic)
        self.scans = 0  # scans of the processes outside the tree (for the cost tests)

    def reset(self) -> None:
        self._outside = None
        self._outside_sockets = None
        self._outside_maps = None
        self._scanned_at = None

    def _expire(self, tree: frozenset[int]) -> None:
        """Drop the outside scan when the tree's processes changed (a process that left the
        tree, or one that joined it, moves holders across) or it is too old."""
        now = time.monotonic()
        old = self._scanned_at is not None and now - self._scanned_at > self.refresh_s
        if tree != self._tree or old:
            self.reset()
        self._tree = tree

    def _scanned(self) -> None:
        self.scans += 1
        if self._scanned_at is None:
            self._scanned_at = time.monotonic()

    def read(
        self,
        snap: Snapshot,
        table: SyscallTable | None,
        fds: Sequence[tuple[int, int]],
        polls: Sequence[tuple[int, int]],
        compat: set[int],
        locked: Sequence[tuple[int, int]] = (),
        futexes: bool = False,
        starts: Mapping[tuple[int, int], float | None] | None = None,
        limit_at: float | None = None,
    ) -> TreeFacts:
        """The facts of the fds of reads and writes (`fds`), of polls (`polls`: (pid, tid)),
        of lock waits (`locked`: (pid, fd)), (`futexes`) the owners and wakers of the
        tree's futex waits (the wake graph), and the deadlines of its timed waits
        (`starts`: each thread's bound on when its current call began, time.monotonic(),
        None for "its own start"; `limit_at`: the run's wall limit)."""
        facts = TreeFacts(compat=set(compat))
        tree = [p.pid for p in snap.processes]
        self._expire(frozenset(tree))
        for proc in snap.processes:
            sources = timers.timer_sources(proc.pid)
            if sources:
                facts.timers[proc.pid] = ", ".join(dict.fromkeys(s.why for s in sources))
                facts.signalled.update(signal_targets(proc, sources))
        if table is not None:
            read_deadlines(facts, snap, table, starts or {}, limit_at)
        wanted = list(fds)
        threads = {(p.pid, t.tid): t for p in snap.processes for t in p.threads}
        for pid, tid in polls:
            th = threads.get((pid, tid))
            if th is None or table is None or not th.syscall.isdigit():
                continue
            watched = polled_fds(pid, table.name(int(th.syscall)), th.syscall_args)
            if watched is not None:
                facts.polled[(pid, tid)] = watched
                wanted += [(pid, fd) for fd, _ in watched]
        for pid, fd in [*wanted, *locked]:  # a lock wait's fd: its file, for lock_facts
            target = procfs.fd_target(pid, fd)
            if target is not None:
                facts.fds[(pid, fd)] = target
                if procfs.fd_writable(pid, fd):
                    facts.writable.add((pid, fd))
        targets = set(facts.fds.values())
        inodes = {ino for t in targets if (ino := pipe_inode(t)) is not None}
        if inodes:
            for pid in tree:
                written, read = procfs.pipe_holders(pid, inodes)
                for ino in written:
                    facts.writers.setdefault(ino, []).append(pid)
                for ino in read:
                    facts.readers.setdefault(ino, []).append(pid)
            for ino, (w, r) in self._outside_pipes(inodes, set(tree)).items():
                if w:
                    facts.outside_writers[ino] = w
                if r:
                    facts.outside_readers[ino] = r
        sockets = {ino for t in targets if (ino := socket_inode(t)) is not None}
        if sockets:
            facts.socket_peers = self._socket_peers(sockets, tree)
        others = [key for key in wanted if pipe_inode(facts.fds.get(key, "")) is None]
        wakeread.fd_facts(facts, others, tree, self.outside_holders)
        wakeread.lock_facts(facts, list(locked), tree, self.outside_holders)
        if futexes and table is not None:
            wakeread.futex_facts(facts, snap, table.number("futex"), self.mapped_outside)
        return facts

    def outside_holders(self, targets: set[str]) -> dict[str, list[int]]:
        """The processes outside the tree holding an fd on each of `targets`, kept like the
        pipe scan (while the tree's processes stay the same, at most refresh_s)."""
        if self._outside_sockets is None or not targets <= self._outside_sockets.keys():
            self._scanned()
            others = [p for p in procfs.all_pids() if p not in self._tree]
            found = wakeread.holders(others, targets)
            self._outside_sockets = {**(self._outside_sockets or {}), **found}
        return {t: self._outside_sockets.get(t, []) for t in targets}

    def mapped_outside(self, pages: set[tuple[str, int]]) -> dict[tuple[str, int], list[int]]:
        """The processes outside the tree mapping each of `pages` ((dev, inode)) shared,
        kept like the pipe scan (while the tree's processes stay the same, refresh_s)."""
        if self._outside_maps is None or not pages <= self._outside_maps.keys():
            self._scanned()
            found: dict[tuple[str, int], list[int]] = {page: [] for page in pages}
            for pid in procfs.all_pids():
                if pid in self._tree:
                    continue
                maps = wakefacts.read_maps(pid)
                if maps is None:
                    # unreadable (a sandbox's init): it may map the page only if it came
                    # after the run started (a deleted or anonymous page is reached by
                    # inheritance; an fd passed over a socket is not foreseen)
                    started = procfs.thread_started(pid, pid)
                    early = started is not None and started < self.run_started
                    if not early and wakefacts.maps_denied(pid) and not _ended(pid):
                        for page in pages:
                            found[page].append(-pid)
                    continue
                for page in maps.shared() & pages:
                    found[page].append(pid)
            self._outside_maps = {**(self._outside_maps or {}), **found}
        return {page: self._outside_maps.get(page, []) for page in pages}

    def _outside_pipes(
        self, inodes: set[int], tree: set[int]
    ) -> dict[int, tuple[list[int], list[int]]]:
        if self._outside is None or not inodes <= self._outside.keys():
            found: dict[int, tuple[list[int], list[int]]] = {ino: ([], []) for ino in inodes}
            self._scanned()
            for pid in procfs.all_pids():
                if pid not in tree:
                    written, read = procfs.pipe_holders(pid, inodes)
                    for ino in written:
                        found[ino][0].append(pid)
                    for ino in read:
                        found[ino][1].append(pid)
            self._outside = {**(self._outside or {}), **found}
        return {ino: self._outside[ino] for ino in inodes}

    def _socket_peers(self, sockets: set[int], tree: list[int]) -> dict[int, list[int]]:
        """Socket inode → tree pids holding its peer, for connected loopback TCP sockets
        whose peer is held by the tree and by no process outside it."""
        conns = _tcp_table(tree[0]) if tree else {}
        by_addr = {(loc, rem): ino for ino, (loc, rem, st) in conns.items() if st == "01"}
        peer_of: dict[int, str] = {}
        for ino in sockets:
            loc, rem, state = conns.get(ino, ("", "", ""))
            other = by_addr.get((rem, loc)) if state == "01" else None
            if other is not None:
                peer_of[ino] = f"socket:[{other}]"
        if not peer_of:
            return {}
        inside = wakeread.holders(tree, set(peer_of.values()))
        away = self.outside_holders(set(peer_of.values()))
        return {ino: inside[p] for ino, p in peer_of.items() if inside[p] and not away[p]}


def signal_targets(
    proc: ProcessSample, sources: Sequence[timers.TimerSource]
) -> dict[tuple[int, int], str]:
    """The threads of `proc` a timer's signal may interrupt (docs/quiescence.md, "Signals"):
    a signal for one thread goes to it; one for the process goes to its main thread when
    that thread lives and does not block it (the kernel tries the thread group's leader
    first), else to any thread that does not block it. A thread whose mask blocks the
    signal is never interrupted by it."""
    live = [t.tid for t in proc.threads if t.state not in ("Z", "X")]
    masks = {tid: timers.blocked_signals(proc.pid, tid) for tid in live}

    def takes(tid: int, signo: int) -> bool:
        mask = masks.get(tid)
        return mask is None or not mask >> (signo - 1) & 1  # unreadable: it may take it

    out: dict[tuple[int, int], str] = {}
    for src in sources:
        if src.tid is not None:
            hit = [src.tid] if src.tid in live and takes(src.tid, src.signal) else []
        elif proc.pid in live and takes(proc.pid, src.signal):
            hit = [proc.pid]
        else:
            hit = [tid for tid in live if takes(tid, src.signal)]
        for tid in hit:
            out.setdefault((proc.pid, tid), src.why)
    return out


def read_deadlines(
    facts: TreeFacts,
    snap: Snapshot,
    table: SyscallTable,
    starts: Mapping[tuple[int, int], float | None],
    limit_at: float | None,
    only: Collection[tuple[int, int]] | None = None,
) -> None:
    """The deadline of every timed wait of the tree (watch/deadlines.py), or of the threads
    `only`, into facts."""
    offsets: dict[int, dict[str, float]] = {}
    for proc in snap.processes:
        if proc.pid in facts.compat:
            continue
        for th in proc.threads:
            if th.state != "S" or not th.syscall.isdigit() or len(th.syscall_args) < 6:
                continue
            if only is not None and (proc.pid, th.tid) not in only:
                continue
            name = table.name(int(th.syscall))
            if name not in deadlines.TIMED_CALLS:
                continue
            pid = proc.pid
            timeout = deadlines.timeout_of(name, th.syscall_args, functools.partial(read_mem, pid))
            if timeout is None:
                continue
            key = (pid, th.tid)
            since = starts.get(key)
            if since is None and not timeout.absolute:
                since = procfs.thread_started(pid, th.tid)
            if pid not in offsets:
                offsets[pid] = _time_offsets(pid)
            found = deadlines.deadline(timeout, since, limit_at, offsets[pid])
            if found is not None:
                facts.deadlines[key] = found


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (its maps read as nothing: it maps nothing)."""
    stat = procfs.read_proc(f"/proc/{pid}/stat")
    if stat is None or ")" not in stat:
        return True
    return stat[stat.rindex(")") + 2 : stat.rindex(")") + 3] in ("Z", "X")


def _time_offsets(pid: int) -> dict[str, float]:
    """The waiter's monotonic and boottime offsets relative to ours: none when it shares
    our time namespace (timens_offsets shows the namespace's offsets from the host's
    clocks, which ours may have too)."""
    try:
        if os.readlink(f"/proc/{pid}/ns/time") == os.readlink("/proc/self/ns/time"):
            return {}
    except OSError:
        return {}  # no time namespaces here
    theirs = deadlines.parse_offsets(procfs.read_proc(f"/proc/{pid}/timens_offsets"))
    ours = deadlines.parse_offsets(procfs.read_proc("/proc/self/timens_offsets"))
    return deadlines.relative_offsets(theirs, ours)


def late_waits(
    snap: Snapshot,
    table: SyscallTable | None,
    timed: Collection[tuple[int, int]],
    starts: Mapping[tuple[int, int], float | None],
    limit_at: float | None,
) -> set[tuple[int, int]]:
    """Of the threads `timed`, those whose timed wait ends only after the run's limit, read
    alone (no other fact); none without a limit (watch/deadlines.py)."""
    if table is None or limit_at is None:
        return set()
    found = TreeFacts(compat={p.pid for p in snap.processes if procfs.is_32bit(p.pid)})
    read_deadlines(found, snap, table, starts, limit_at, only=timed)
    return {key for key, d in found.deadlines.items() if d.past}


def process_io(pids: Iterable[int]) -> dict[int, tuple[int, int]] | None:
    """pid → (rchar, wchar) from /proc/PID/io; None when any cannot be read."""
    out = {}
    for pid in pids:
        text = procfs.read_proc(f"/proc/{pid}/io")
        if text is None:
            return None
        fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        try:
            out[pid] = (int(fields["rchar"]), int(fields["wchar"]))
        except (KeyError, ValueError):
            return None
    return out
