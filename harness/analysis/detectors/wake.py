"""The wake graph's readings (docs/quiescence.md, "Causes from the graph"): one detector over
the wake chain (`samples.wake`, watch/wakegraph.py) whose rules are data
(harness/data/causes/wake.toml). A rule says where the chain must end (a cycle, nobody, a
dead waker, a polling loop), what its links must wait on (pipes, sockets, file locks,
mutexes …), across how many processes, and whether a process that left the run's tree is on
it; the sentence is then told from the chain itself. No library is named: the same reading
explains a socketpair protocol, a TCP handshake and an asyncio pidfd wait alike.

For a chain that ends in a cycle, the links that count are the cycle's (the thread the user
sees waiting may only wait for it: the parent joining two deadlocked workers); for any
other end, the whole chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.sampling.model import WAKE_EVIDENCE, WakeChain, WakeLink
from harness.vocab import WaitVia, WakeEnd

# how a kind of wait reads in a sentence, plural ("over sockets and pipes")
_PLURAL = {
    WaitVia.FUTEX: "futexes",
    WaitVia.MUTEX: "mutexes",
    WaitVia.EXIT: "process exits",
    WaitVia.PIPE: "pipes",
    WaitVia.SOCKET: "sockets",
    WaitVia.FILE_LOCK: "file locks",
    WaitVia.EVENTFD: "eventfds",
    WaitVia.FILE: "files",
    WaitVia.POLL: "polled fds",
    WaitVia.OTHER: "other waits",
}


@dataclass(frozen=True)
class WakeParams:
    """What a rule reads in the chain. Every condition given must hold."""

    ends: tuple[WakeEnd, ...]  # where the chain ends
    # every link that counts waits on one of these (empty: any)
    via: tuple[WaitVia, ...] = ()
    # at least one link that counts waits on one of these (empty: no condition)
    some_via: tuple[WaitVia, ...] = ()
    processes: int = 1  # at least this many processes among the links that count
    # a process on the chain was started by the run and has left its tree (an orphan, a
    # daemon); false: no condition
    departed: bool = False
    polled: bool = False  # the end is a polling loop whose syscalls were traced


def counted(wake: WakeChain) -> list[WakeLink]:
    """The links that count: a cycle's own, else the whole chain."""
    if wake.end is not WakeEnd.CYCLE or wake.end_tid is None:
        return list(wake.links)
    back = (wake.end_pid, wake.end_tid)
    at = next((i for i, k in enumerate(wake.links) if (k.pid, k.tid) == back), 0)
    return list(wake.links[at:])


def _pids(wake: WakeChain, links: Sequence[WakeLink]) -> list[int]:
    """The processes of the links that count; the end's, when the chain is only its end."""
    pids = list(dict.fromkeys(k.pid for k in links))
    return pids or ([wake.end_pid] if wake.end_pid is not None else [])


def _plural(vias: Sequence[WaitVia]) -> str:
    words = [_PLURAL.get(v, v.value) for v in dict.fromkeys(vias)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def departed_at(wake: WakeChain) -> int | None:
    """The first link in a process that left the run's tree whose thread is waited on by a
    link of a process still in it: what the run waits on is held there. None when no such
    link (none left the tree, or the chain starts in the departed process: then that
    process is what hangs, not what holds)."""
    links = wake.links
    return next((i for i in range(1, len(links)) if links[i].note and not links[i - 1].note), None)


def _step(k: WakeLink) -> str:
    return f"pid {k.pid} tid {k.tid} ({k.name}): {k.what}"


def _holds(wake: WakeChain, params: WakeParams, links: Sequence[WakeLink]) -> bool:
    if wake.end not in params.ends:
        return False
    vias = [k.via for k in links]
    if params.via and any(v not in params.via for v in vias):
        return False
    if params.some_via and not any(v in params.some_via for v in vias):
        return False
    if len(_pids(wake, links)) < params.processes:
        return False
    if params.departed and departed_at(wake) is None:
        return False
    return not params.polled or bool(wake.polled)


@detector(
    "wake-chain",
    params=WakeParams,
    fields=(
        "waiter",
        "first_wait",
        "steps",
        "pids",
        "threads",
        "waits",
        "end",
        "end_what",
        "end_pid",
        "end_tid",
        "departed_pid",
        "departed_name",
        "departed_what",
        "blocked",
        "blocked_wait",
    ),
)
def wake_chain(seen: Inputs, params: WakeParams) -> list[Match]:
    """The chain, when it reads as the rule says: one match (one reading of one graph)."""
    wake = seen.samples.wake
    if wake is None:
        return []
    links = counted(wake)
    if not _holds(wake, params, links):
        return []
    first = wake.links[0] if wake.links else None
    at = departed_at(wake)
    gone = wake.links[at] if at is not None else None
    # the thread that waits on what the departed process holds (the link before it)
    blocked = wake.links[at - 1] if at is not None else first
    pids = _pids(wake, links)
    end_pid = "" if wake.end_pid is None else str(wake.end_pid)
    end_tid = "" if wake.end_tid is None else str(wake.end_tid)
    waiter = f"pid {first.pid} tid {first.tid} ({first.name})" if first else f"pid {end_pid}"
    evidence = [f"{WAKE_EVIDENCE}{wake.text()}"]
    if gone is not None:
        evidence.append(f"pid {gone.pid} ({gone.name}): {gone.note}")
    return [
        match(
            evidence,
            waiter=waiter,
            first_wait=first.what if first else wake.end_what,
            steps=" → ".join(_step(k) for k in links),
            pids=", ".join(map(str, pids)),
            threads=", ".join(str(k.tid) for k in links),
            waits=_plural([k.via for k in links]) if links else "",
            end=wake.end.value,
            end_what=wake.end_what,
            end_pid=end_pid,
            end_tid=end_tid,
            departed_pid=gone.pid if gone else "",
            departed_name=gone.name if gone else "",
            departed_what=gone.what if gone else "",
            blocked=f"pid {blocked.pid} tid {blocked.tid} ({blocked.name})" if blocked else "",
            blocked_wait=blocked.what if blocked else "",
        )
    ]
