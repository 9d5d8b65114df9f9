"""The wake graph's facts for one look (docs/quiescence.md, "The wake graph"): for each fd
a wait is on that is neither a pipe nor a loopback TCP socket, the tree processes that
alone could end the wait — a unix socket's peer holders, an eventfd's holders, a pidfd's
process, a file lock's holders — and for futex waits the owner of a pthread mutex and the
processes mapping a shared futex's page. A fact is written only when every possible waker
is in the tree and none is outside; otherwise the fd gets only a description (`fd_what`)
and its wait stays outside, as before.

The scans of processes outside the tree are the costly part: they are asked for by the
caller (`Outside`), which keeps them for a while like the pipe scan (treefacts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from harness.sampling import locks, procfs
from harness.sampling.model import Snapshot
from harness.sampling.waits import FUTEX_PRIVATE_FLAG
from harness.watch import wakefacts
from harness.watch.fdwaits import TreeFacts, socket_inode

_EVENTFD, _PIDFD, _TIMERFD = "anon_inode:[eventfd]", "anon_inode:[pidfd]", "anon_inode:[timerfd]"
# an eventfd may be signalled by the kernel for an io_uring or an AIO context the tree holds
_KERNEL_SIGNALLERS = ("anon_inode:[io_uring]", "anon_inode:[aio]", "/[aio]")

# scan(targets) → {target: [pids outside the tree holding an fd on it]}, cached by the caller
Outside = Callable[[set[str]], dict[str, list[int]]]


def holders(pids: Iterable[int], targets: set[str]) -> dict[str, list[int]]:
    """Which of `pids` hold an fd whose readlink is one of `targets`."""
    found: dict[str, list[int]] = {t: [] for t in targets}
    for pid in pids:
        for _, t in procfs.fd_targets(pid):
            if t in found and pid not in found[t]:
                found[t].append(pid)
    return found


def _eventfds(pids: Iterable[int]) -> dict[int, list[int]]:
    """eventfd-id → the pids holding it."""
    out: dict[int, list[int]] = {}
    for pid in pids:
        for fd, t in procfs.fd_targets(pid):
            ident = wakefacts.eventfd_id(pid, fd) if t == _EVENTFD else None
            if ident is not None and pid not in out.setdefault(ident, []):
                out[ident].append(pid)
    return out


def _kernel_signaller(pids: Iterable[int]) -> bool:
    return any(t.startswith(_KERNEL_SIGNALLERS) for pid in pids for _, t in procfs.fd_targets(pid))


def _say(facts: TreeFacts, key: tuple[int, int], what: str, wakers: Sequence[int] | None) -> None:
    facts.fd_what[key] = what
    if wakers is not None:
        facts.fd_wakers[key] = tuple(sorted(set(wakers)))


def unix_peers(
    facts: TreeFacts, sockets: set[int], tree: list[int], outside: Outside
) -> dict[int, str]:
    """Socket inode → its peer's readlink target, for connected unix sockets only their
    peer can end a wait on; the tree's holders of each peer go into `facts.socket_peers`
    when no process outside holds it. Returns a description for the others."""
    table = wakefacts.unix_sockets()
    notes: dict[int, str] = {}
    if table is None:
        return {ino: "a socket (sock_diag unavailable)" for ino in sockets}
    peer_of: dict[int, str] = {}
    for ino in sockets:
        info = table.get(ino)
        if info is None:
            continue  # not a unix socket of this network namespace (TCP, or another netns)
        if info.state == wakefacts.UNIX_LISTEN:
            notes[ino] = f"unix socket {ino}, listening: anyone who can reach it may connect"
        elif info.peer == 0:
            notes[ino] = f"unix socket {ino} without a peer"
        elif info.type == wakefacts.SOCK_DGRAM and info.named:
            notes[ino] = f"unix datagram socket {ino}, named: anyone may send to it"
        else:
            peer_of[ino] = f"socket:[{info.peer}]"
    if not peer_of:
        return notes
    inside = holders(tree, set(peer_of.values()))
    away = outside(set(peer_of.values()))
    for ino, peer in peer_of.items():
        if away.get(peer):
            notes[ino] = (
                f"unix socket {ino}, its peer {peer} held outside the tree (pid {away[peer][0]})"
            )
        elif inside[peer]:
            facts.socket_peers[ino] = inside[peer]
            notes[ino] = f"unix socket {ino}, peer {peer} held by pid {inside[peer][0]}"
        else:
            notes[ino] = f"unix socket {ino}, its peer {peer} held by no process (in flight?)"
    return notes


def fd_facts(
    facts: TreeFacts, keys: Sequence[tuple[int, int]], tree: list[int], outside: Outside
) -> None:
    """The facts of the fds `keys` ((pid, fd), their targets already in facts.fds) that are
    not pipes: unix sockets, eventfds, pidfds, timerfds, locked files."""
    tree_set = set(tree)
    sockets: dict[int, list[tuple[int, int]]] = {}
    events: list[tuple[int, int]] = []
    for key in keys:
        target = facts.fds.get(key)
        if target is None:
            continue
        sock = socket_inode(target)
        if sock is not None:
            if sock not in facts.socket_peers:
                sockets.setdefault(sock, []).append(key)
        elif target == _EVENTFD:
            events.append(key)
        elif target == _PIDFD:
            child = wakefacts.pidfd_pid(*key)
            if child is not None and child in tree_set:
                _say(facts, key, f"pidfd of pid {child}, in the tree: its exit", [child])
            else:
                _say(facts, key, f"pidfd of pid {child}, not in the tree", None)
        elif target == _TIMERFD:
            armed = wakefacts.timerfd_armed(*key)
            if armed is not None:
                facts.timerfds[key] = armed
    if sockets:
        notes = unix_peers(facts, set(sockets), tree, outside)
        for sock, fds in sockets.items():
            for key in fds:
                if sock in notes:
                    facts.fd_what[key] = notes[sock]
    if events:
        if _kernel_signaller(tree):
            for key in events:
                _say(facts, key, "an eventfd (the tree holds an io_uring or AIO context)", None)
        else:
            inside = _eventfds(tree)
            away = outside({_EVENTFD})  # the outside holders of any eventfd: ids read below
            others = _eventfds(p for p in away.get(_EVENTFD, []) if p not in tree_set)
            for key in events:
                ident = wakefacts.eventfd_id(*key)
                if ident is None:
                    _say(facts, key, "an eventfd (no eventfd-id on this kernel)", None)
                elif others.get(ident):
                    _say(facts, key, f"eventfd {ident}, held outside the tree", None)
                else:
                    pids = inside.get(ident, [])
                    _say(facts, key, f"eventfd {ident}, held by pids {pids}", pids)


def lock_facts(
    facts: TreeFacts, keys: Sequence[tuple[int, int]], tree: list[int], outside: Outside
) -> None:
    """For fds a thread waits to lock (flock, fcntl F_SETLKW): the lock's holders
    (/proc/locks) and the processes holding the file open (a flock belongs to an open file
    description, which children inherit: any of them may release it by closing it)."""
    if not keys:
        return  # /proc/locks is read only for a lock wait (it lists every lock on the host)
    table = wakefacts.read_locks()
    if table is None:
        return
    tree_set = set(tree)
    for key in keys:
        target = facts.fds.get(key)
        found = wakefacts.fd_file(*key)
        if target is None or found is None:
            continue
        held = [
            lk.pid
            for lk in table
            if not lk.blocked and (lk.dev, lk.inode) == (found.dev, found.inode) and lk.pid > 0
        ]
        open_in = holders(tree, {target})[target]
        away = [p for p in outside({target}).get(target, []) if p not in tree_set]
        gone = [p for p in held if p not in tree_set and wakefacts.process_gone(p)]
        alive_out = [p for p in held if p not in tree_set and p not in gone]
        named = f"lock on {target}"
        if held:
            named += f", held by pid {held[0]}" + (" (exited)" if held[0] in gone else "")
        if alive_out or away:
            who = (alive_out or away)[0]
            _say(facts, key, f"{named}; pid {who} outside the tree may release it", None)
        else:
            wakers = [*open_in, *(p for p in held if p in tree_set)]
            _say(facts, key, f"{named}; only the tree holds the file", wakers)


# scan({(dev, inode)}) → {(dev, inode): [pids outside the tree mapping it shared]}
MappedOutside = Callable[[set[tuple[str, int]]], dict[tuple[str, int], list[int]]]


def futex_facts(
    facts: TreeFacts,
    snap: Snapshot,
    futex_nr: int | None,
    mapped_outside: MappedOutside | None = None,
) -> None:
    """Mutex owners (sampling.locks: read from the mutex in memory) for the futex waits of
    the tree, and the wakers of futexes in shared mappings: the processes mapping the same
    file or segment, when `mapped_outside` finds none outside the tree (None: not asked,
    the shared futexes stay unresolved)."""
    if futex_nr is None:
        return
    parsed: dict[int, wakefacts.Maps | None] = {}  # each process's maps, read once a look

    def _maps(pid: int) -> wakefacts.Maps | None:
        if pid not in parsed:
            parsed[pid] = wakefacts.read_maps(pid)
        return parsed[pid]

    def _shared(pid: int) -> set[tuple[str, int]]:
        found = _maps(pid)
        return found.shared() if found is not None else set()

    tid_pid = {t.tid: p.pid for p in snap.processes for t in p.threads}
    shared: list[tuple[int, int, wakefacts.Mapping]] = []  # (pid, address, its mapping)
    all_tids = set(tid_pid)
    for proc in snap.processes:
        waiting = [
            t
            for t in proc.threads
            if t.state == "S" and t.syscall == str(futex_nr) and len(t.syscall_args) >= 4
        ]
        if not waiting or proc.pid in facts.compat:
            continue
        for w in locks.process_waits(
            proc.pid, proc.threads, python=proc.is_python, shared_owners=all_tids
        ):
            # a timed wait's owner too: a wait past the run's limit counts as untimed
            key = (proc.pid, w.tid)
            if w.what.is_mutex and w.owner is not None and w.owner in tid_pid:
                facts.owners[key] = (tid_pid[w.owner], w.owner)
        for th in waiting:
            addr, op = th.syscall_args[0], th.syscall_args[1]
            if op & FUTEX_PRIVATE_FLAG or (proc.pid, th.tid) in facts.owners:
                continue  # private: its own process is its only waker
            maps = _maps(proc.pid)
            found = maps.at(addr) if maps is not None else None
            if found is None:
                continue
            if not found.shared:
                facts.futex_wakers[(proc.pid, addr)] = (proc.pid,)
                continue
            shared.append((proc.pid, addr, found))
    # a shared mapping (multiprocessing's locks, an unnamed or unlinked POSIX semaphore, a
    # process-shared pthread object in MAP_SHARED|MAP_ANONYMOUS memory): the processes that
    # map the same page could wake it. Resolved only when nobody else can reach it later (a
    # deleted file, anonymous memory: mapped by inheritance alone; a named file or a SysV
    # segment may be opened or attached by anyone later) and no process outside the tree
    # maps it now (one scan for every page of the look; unreadable maps: not proven)
    pages = {(f.dev, f.inode) for _, _, f in shared}
    away = mapped_outside(pages) if mapped_outside is not None and pages else {}
    for pid, addr, found in shared:
        page = (found.dev, found.inode)
        mappers = [p.pid for p in snap.processes if page in _shared(p.pid)]
        where = found.path or "an anonymous shared mapping"
        outside = away.get(page)
        unreachable = found.path.endswith("(deleted)") or found.path.startswith("/dev/zero")
        if found.path.startswith("/SYSV") or not unreachable:
            why = "a process may still open or attach it"
        elif outside is None:
            why = "its outside mappers not scanned"
        elif outside:
            who = "whose maps cannot be read" if outside[0] < 0 else "outside the tree maps it"
            why = f"pid {outside[0]} {who}" if outside[0] > 0 else f"a process {who}"
        else:
            facts.futex_wakers[(pid, addr)] = tuple(sorted(mappers))
            listed = ", ".join(map(str, sorted(mappers)[:6]))
            facts.futex_what[(pid, addr)] = (
                f"a shared mapping of {where}, mapped only by pid(s) {listed}"
            )
            continue
        facts.futex_what[(pid, addr)] = f"a shared mapping of {where}; {why}"
