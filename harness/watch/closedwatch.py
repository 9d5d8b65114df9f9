"""The closed-set verdict over consecutive looks (docs/quiescence.md, "Closed sets"): the
same closed set of the wake graph (`wakegraph.closed_set`), its threads unchanged — the same
state, syscall and six arguments, no CPU tick, not scheduled once (schedstat) — for
CLOSED_CONFIRM_S over at least CLOSED_LOOKS looks. Pure: fed one look at a time.

Why a second is enough where whole-tree quiescence waits 5 s: that window covers a wake-up
between two looks that left no trace in /proc but the CPU and the arguments; here every
thread of the set is also read for its run count (schedstat), which any wake-up raises,
and the set's wakers are proven to be the set itself, not merely "the tree".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from harness.sampling.model import Snapshot
from harness.sampling.waits import ThreadWait, Wait
from harness.vocab import WaitKind

Key = tuple[int, int]
CLOSED_CONFIRM_S = 1.0
CLOSED_LOOKS = 4  # looks after the first one that found the set (5 looks at 0.25 s)

_Seen = tuple[str, str, tuple[int, ...], float, int | None]


def _seen(snap: Snapshot, keys: Collection[Key]) -> dict[Key, _Seen]:
    wanted = set(keys)
    return {
        (p.pid, t.tid): (t.state, t.syscall, tuple(t.syscall_args), t.cpu_time, t.runs)
        for p in snap.processes
        for t in p.threads
        if (p.pid, t.tid) in wanted
    }


def moved(
    before: dict[Key, _Seen],
    after: dict[Key, _Seen],
    runs: bool = True,
    cpu_slack: float = 0.0,
    loops: Collection[Key] = (),
) -> str | None:
    """Why the set is not as it was (None: unchanged). `loops`: polling loops resolved to
    the lock they poll (watch/pollloops.py): they wake by design, and the reading itself is
    dropped when one does anything else."""
    if before.keys() != after.keys():
        return "a thread of the set exited"
    for key, (state, nr, args, cpu, count) in after.items():
        if key in loops:
            continue
        b = before[key]
        if (state, nr, args) != b[:3]:
            return f"tid {key[1]} changed what it waits on"
        if cpu - b[3] > cpu_slack:
            return f"tid {key[1]} used {cpu - b[3]:.2f}s of CPU"
        if runs and count is not None and b[4] is not None and count != b[4]:
            return f"tid {key[1]} was scheduled {count - b[4]} time(s)"
    return None


@dataclass
class ClosedWatch:
    """The closed set seen at consecutive looks, and since when (the snapshots' clock)."""

    members: frozenset[Key] = frozenset()
    since: float | None = None
    looks: int = 0
    _last: dict[Key, _Seen] = field(default_factory=dict)
    _loops: frozenset[Key] = frozenset()  # the set's resolved polling loops

    def reset(self) -> None:
        self.members, self.since, self.looks, self._last = frozenset(), None, 0, {}

    def look(self, snap: Snapshot, closed: frozenset[Key], loops: Collection[Key] = ()) -> None:
        if not closed:
            self.reset()
            return
        now = _seen(snap, closed)
        self._loops = frozenset(loops)
        if (
            closed != self.members
            or self.since is None
            or moved(self._last, now, loops=self._loops) is not None
        ):
            self.members, self.since, self.looks = closed, snap.t, 0
        else:
            self.looks += 1
        self._last = now

    def ready_since(self) -> float | None:
        """Since when the set has held, once it has held for CLOSED_LOOKS looks."""
        return self.since if self.looks >= CLOSED_LOOKS else None

    def confirm(self, snap: Snapshot) -> str | None:
        """After the stack dump: the set's threads as they were at the last look, a tracer's
        attach forgiven (0.05 s of CPU, the run count)."""
        after = _seen(snap, self.members)
        return moved(self._last, after, runs=False, cpu_slack=0.05, loops=self._loops)


def by_key(waits: list[tuple[ThreadWait, Wait]]) -> dict[tuple[int, int], Wait]:
    return {(tw.pid, tw.tid): w for tw, w in waits}


def settled(waits: list[tuple[ThreadWait, Wait]], prev: Snapshot | None, snap: Snapshot) -> bool:
    """Some thread waits on the tree (or on fds not looked at yet) exactly as it did at the
    last look: worth the facts that tell whether it belongs to a closed set. A thread that
    just started waiting is not looked into yet (a busy program's waits come and go)."""
    if prev is None:
        return False
    before = {(p.pid, t.tid): t for p in prev.processes for t in p.threads}
    now = {(p.pid, t.tid): t for p in snap.processes for t in p.threads}
    for tw, w in waits:
        # a timed wait asks for facts for its deadline (`pending` "deadline"), but alone it
        # is not worth them on every look: a sleeping thread beside a busy one is common
        if w.kind is not WaitKind.TREE and w.pending in ("", "deadline"):
            continue
        b, a = before.get((tw.pid, tw.tid)), now.get((tw.pid, tw.tid))
        if (
            a is not None
            and b is not None
            and (a.state, a.syscall, a.syscall_args)
            == (
                b.state,
                b.syscall,
                b.syscall_args,
            )
        ):
            return True
    return False


def closed_words(members: frozenset[tuple[int, int]]) -> str:
    """A closed set in words: "3 threads of pids 10, 11"."""
    if not members:
        return ""
    pids = sorted({p for p, _ in members})
    shown = ", ".join(map(str, pids[:6])) + (" …" if len(pids) > 6 else "")
    n = len(members)
    return f"{n} thread{'s' if n > 1 else ''} of pid{'s' if len(pids) > 1 else ''} {shown}"
