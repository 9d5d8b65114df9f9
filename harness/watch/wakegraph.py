"""The wake graph (docs/quiescence.md, "The wake graph"): for every waiting thread, who could
end its wait, and from there two answers, as pure functions over one look's waits:

- **the closed set**: the largest set of blocked threads whose every possible waker is in
  the set itself. Nothing outside it can end any of its waits and nothing inside it runs,
  so it is deadlocked even while the rest of the run keeps going (a telemetry thread, a
  parent polling with a timeout). A thread whose wait has no possible waker at all (the
  only thread of a process on a private futex) is the smallest such set.
- **the chain**: from the thread the user sees waiting, each link "waits on X, which only
  Y can end", to where it ends: a cycle, nobody, a dead thread or process, a running or
  timed thread (a polling loop), a thread asleep until after the run's limit (late), a peer
  outside the run, a stopped process.

A wait's wakers come from `Wait.wakers`/`Wait.owners`, filled by the rule (quiescence,
fdwaits) from the kernel's facts; only a `resolved` wait (every waker known, none outside,
no timeout, or one that ends only after the run's limit: watch/deadlines.py) can belong to
a closed set, so anything the facts cannot prove keeps the conservative meaning of
"outside / unknown".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from harness.sampling.model import ProcessEvent, Snapshot, ThreadSample, WakeChain, WakeLink
from harness.sampling.waits import Wait
from harness.vocab import EventKind, WaitKind, WaitVia, WakeEnd

Key = tuple[int, int]
MAX_LINKS = 16  # a chain is cut here (a report line, not a graph dump)


def _live(snap: Snapshot) -> dict[int, set[Key]]:
    """pid → its live threads (state not Z/X)."""
    return {
        p.pid: {(p.pid, t.tid) for t in p.threads if t.state not in ("Z", "X")}
        for p in snap.processes
    }


def _alive(live: Mapping[int, set[Key]]) -> set[Key]:
    return set().union(*live.values()) if live else set()


def _waker_threads(w: Wait, live: Mapping[int, set[Key]], alive: set[Key], me: Key) -> set[Key]:
    """The live threads that could end `w` (the waiter itself excluded: it is asleep)."""
    if w.owners:
        return {o for o in w.owners if o in alive and o != me}
    out: set[Key] = set()
    for pid in w.wakers:
        out |= live.get(pid, set())
    out.discard(me)
    return out


def closed_set(snap: Snapshot, waits: Mapping[Key, Wait]) -> frozenset[Key]:
    """The largest set of blocked threads that only each other could wake (a greatest
    fixpoint: start from every resolved untimed wait, drop a thread while any of its
    possible wakers is outside the set, until nothing drops)."""
    live = _live(snap)
    alive = _alive(live)
    cand = {k for k, w in waits.items() if k in alive and w.kind is WaitKind.TREE and w.resolved}
    while True:
        drop = {k for k in cand if not _waker_threads(waits[k], live, alive, k) <= cand}
        if not drop:
            break
        cand -= drop
    # a set of timed waits only (deadlines past the run's limit: a long sleep, a cycle of
    # waits with long timeouts) ends by itself, after the verdict: a hang only when nothing
    # else of the tree runs either (a daemon thread's `sleep(120)` beside a busy main is
    # not one; a thread in an untimed wait on it, or the whole tree, is)
    if cand and all(waits[k].late_s is not None for k in cand) and cand != alive:
        return frozenset()
    return frozenset(cand)


def _threads(snap: Snapshot) -> dict[Key, ThreadSample]:
    return {(p.pid, t.tid): t for p in snap.processes for t in p.threads}


def _end_of(w: Wait, th: ThreadSample | None) -> tuple[WakeEnd, str] | None:
    """Where a chain ends at a thread that does not wait on the tree; None: it does."""
    state = th.state if th is not None else ""
    if state in ("T", "t"):
        return WakeEnd.STOPPED, f"stopped (state {state}): only a SIGCONT or its tracer resumes it"
    if state == "D":
        return WakeEnd.UNINTERRUPTIBLE, w.what
    if w.kind is WaitKind.RUNNING:
        return WakeEnd.RUNNING, "runs (on a CPU or runnable)"
    if w.kind in (WaitKind.TIMED, WaitKind.HOUSEKEEPING):
        return WakeEnd.TIMED, f"{w.what}: it wakes by itself (a sleep, or a loop that polls)"
    if w.kind is WaitKind.OUTSIDE:
        return WakeEnd.OUTSIDE, w.what
    if w.kind is WaitKind.UNKNOWN:
        return WakeEnd.UNKNOWN, w.what
    if w.kind is WaitKind.DONE:
        return WakeEnd.DEAD, "exited"
    if w.late_s is not None and w.resolved and not w.wakers and not w.owners:
        # a sleep past the run's limit: only its timer ends it, after the verdict
        return WakeEnd.LATE, w.what
    if not w.resolved:
        return WakeEnd.UNKNOWN, f"{w.what}: who could end it is not known"
    return None


def _rank(key: Key, waits: Mapping[Key, Wait], seen: Collection[Key]) -> tuple[int, int, int]:
    """Which waker to follow: one not on the chain yet, then one that does not wait on the
    tree (it says why the wait goes on), then a main thread, then the lowest tid."""
    w = waits.get(key)
    tree = w is not None and w.kind is WaitKind.TREE
    return (key in seen, tree, 0 if key[0] == key[1] else 1)


def _note(pid: int, snap: Snapshot, root: int) -> str:
    parents = {p.pid: p.ppid for p in snap.processes}
    if pid != root and parents.get(pid) not in parents:
        return "started by the run, no longer in its tree (an orphan or a daemon)"
    return ""


@dataclass(frozen=True)
class Death:
    """A process of the run that the watch saw end badly (a signal, a non-zero exit)."""

    pid: int
    ppid: int
    name: str
    status: str  # "killed by SIGKILL", "exited 1"
    t: float  # seconds since launch


def deaths(events: Sequence[ProcessEvent]) -> list[Death]:
    """The processes the watch saw end badly (a signal, a non-zero exit), from its events."""
    return [
        Death(e.pid, e.ppid, e.name, e.status, e.t)
        for e in events
        if e.event is EventKind.EXIT and e.status_known and (e.signal or e.exit_code)
    ]


def _dead_mapper(
    links: Sequence[WakeLink], waits: Mapping[Key, Wait], deaths: Sequence[Death]
) -> tuple[WakeEnd, str] | None:
    """A chain through a futex in a shared mapping (a semaphore, a lock of multiprocessing,
    a process-shared mutex) that no live process outside the waiters can end, where a child
    of one of the mapping's processes died during the run: forked from a mapper, it shared
    the page, and what it held or owed there (a lock taken, a post or a barrier arrival)
    is gone with it. Said as what may be, from the watch's events: the death comes before
    the cycle it left behind."""
    for link in links:
        w = waits.get((link.pid, link.tid))
        if w is None or w.via is not WaitVia.FUTEX or w.private or not w.resolved:
            continue
        dead = next((d for d in deaths if d.ppid in w.wakers), None)
        if dead is not None:
            return WakeEnd.DEAD, (
                f"pid {dead.pid} ({dead.name}), a child of pid {dead.ppid}, which maps the "
                f"futex's page, {dead.status} at {dead.t:.1f}s; it shared that page, and what "
                "it held or owed there (a lock it took, a post, an arrival) went with it: no "
                "live process but the waiters maps it"
            )
    return None


def chain(
    snap: Snapshot,
    waits: Mapping[Key, Wait],
    start: Key,
    root: int,
    closed: Collection[Key] = (),
    gone: Mapping[int, Sequence[int]] | None = None,
    deaths: Sequence[Death] = (),
) -> WakeChain:
    """The chain from `start`. `gone`: pid → threads of it seen earlier in the run that have
    exited (a chain that ends at nobody in such a process ends at a dead thread); `deaths`:
    the processes of the run seen ending badly (a chain through a shared mapping one of
    them shared, that ends in a cycle or at nobody, ends at that death)."""
    found = _chain(snap, waits, start, root, closed, gone)
    pids = dict.fromkeys(k.pid for k in found.links)
    found.lost = [[pid, tid] for pid in pids for tid in (gone or {}).get(pid, [])][:16]
    if found.end in (WakeEnd.CYCLE, WakeEnd.NOBODY) and deaths:
        dead = _dead_mapper(found.links, waits, deaths)
        if dead is not None:
            found.end, found.end_what = dead
            found.end_pid = found.end_tid = None
    return found


def _chain(
    snap: Snapshot,
    waits: Mapping[Key, Wait],
    start: Key,
    root: int,
    closed: Collection[Key],
    gone: Mapping[int, Sequence[int]] | None,
) -> WakeChain:
    threads = _threads(snap)
    live = _live(snap)
    alive = _alive(live)
    names = {p.pid: p.name for p in snap.processes}
    links: list[WakeLink] = []
    seen: list[Key] = []
    key: Key | None = start
    closed_pairs = [[p, t] for p, t in sorted(closed)]
    while key is not None and len(links) < MAX_LINKS:
        w = waits.get(key)
        th = threads.get(key)
        if w is None:
            return WakeChain(links, WakeEnd.DEAD, "exited", *key, closed=closed_pairs)
        ended = _end_of(w, th)
        if ended is not None and ended[0] is WakeEnd.LATE:
            # who sleeps, and how it belongs to the run: the end is what holds the chain
            name = th.name if th is not None else names.get(key[0], "?")
            note = _note(key[0], snap, root)
            what = f"pid {key[0]} ({name}) sleeps{f' [{note}]' if note else ''}: {ended[1]}"
            return WakeChain(links, ended[0], what, *key, closed=closed_pairs)
        if ended is not None:
            return WakeChain(links, ended[0], ended[1], *key, closed=closed_pairs)
        seen.append(key)
        name = th.name if th is not None else names.get(key[0], "?")
        link = WakeLink(
            key[0], key[1], name, w.what, w.on, list(w.wakers), _note(key[0], snap, root), w.via
        )
        links.append(link)
        nxt = sorted(_waker_threads(w, live, alive, key), key=lambda k: _rank(k, waits, seen))
        if not nxt:
            return WakeChain(links, *_nobody(w, key, live, gone), *key, closed=closed_pairs)
        if nxt[0] in seen:
            back = nxt[0]
            what = f"back to pid {back[0]} tid {back[1]}: they wait for each other"
            return WakeChain(links, WakeEnd.CYCLE, what, *back, closed=closed_pairs)
        key = nxt[0]
    return WakeChain(links, WakeEnd.UNKNOWN, "the chain is longer than shown", closed=closed_pairs)


def _nobody(
    w: Wait, key: Key, live: Mapping[int, set[Key]], gone: Mapping[int, Sequence[int]] | None
) -> tuple[WakeEnd, str]:
    """No live thread could end the wait: whose thread it was, when the run showed one."""
    if w.owners:
        owner = w.owners[0]
        return WakeEnd.DEAD, f"tid {owner[1]}, which holds the mutex, no longer exists"
    exited = [p for p in w.wakers if not live.get(p)]
    if exited:
        return WakeEnd.DEAD, f"pid {exited[0]}, the only one that could end it, has exited"
    lost = list((gone or {}).get(key[0], []))
    if lost and key[0] in w.wakers:
        listed = ", ".join(map(str, lost[:4]))
        return WakeEnd.DEAD, (
            f"the other threads of pid {key[0]} (tid {listed}) have exited; "
            "no thread is left that could end the wait"
        )
    return WakeEnd.NOBODY, "no live thread or process could end the wait"


def start_of(
    snap: Snapshot, waits: Mapping[Key, Wait], root: int, closed: Collection[Key]
) -> Key | None:
    """The thread the user sees waiting: the root's main thread, or, when the closed set
    leaves the root out (the rest of the run goes on), the set's thread nearest the root."""
    depth: dict[int, int] = {}
    parents = {p.pid: p.ppid for p in snap.processes}

    def level(pid: int) -> int:
        d, cur = 0, pid
        while cur in parents and cur != root and d < 64:
            cur, d = parents[cur], d + 1
        return d if cur == root else 64 + d

    for p in snap.processes:
        depth[p.pid] = level(p.pid)
    pool = list(closed) or [k for k, w in waits.items() if w.kind is WaitKind.TREE]
    if not closed and (root, root) in waits:
        return (root, root)
    if not pool:
        return (root, root) if (root, root) in waits else None
    return min(pool, key=lambda k: (depth.get(k[0], 99), k[0] != k[1], k))
