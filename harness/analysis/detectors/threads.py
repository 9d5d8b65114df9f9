"""Detectors over threads waiting on each other: a mutex wait-for cycle, Python threads
blocked acquiring locks, one thread spinning while the ones it waits for are blocked."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.detectors.views import stack_line, stacks_of, top
from harness.config.causes import NoParams
from harness.sampling.model import BUSY_FRACTION, RUNNABLE_FRACTION, spinning


@detector("lock-cycle", fields=("pid", "cycle"))
def lock_cycle(seen: Inputs, params: NoParams) -> list[Match]:
    """The pthread mutex wait-for cycles the sampler found (sampling/locks.py)."""
    out: list[Match] = []
    for cycle in seen.samples.lock_cycles:
        links = [
            f"{link.name} (tid {link.tid}) waits for mutex {link.mutex} held by "
            f"{link.owner_name} (tid {link.owner})"
            for link in cycle.links
        ]
        out.append(match(links, pid=cycle.pid, cycle="; ".join(links)))
    return out


_PY_ACQUIRE = re.compile(r"PyThread_acquire_lock\w*|acquire_timed|lock_PyThread_acquire_lock")


@detector("python-locks", fields=("pid", "threads", "functions"))
def python_locks(seen: Inputs, params: NoParams) -> list[Match]:
    """Python threads blocked acquiring a lock in the program's own code (their native
    stack is in CPython's lock acquire, their Python stack's innermost frame is own code,
    not threading.py's join or Condition.wait)."""
    s = seen.samples
    out: list[Match] = []
    for pid in sorted({st.pid for st in s.stacks if st.python}):
        acquiring = {
            st.tid
            for st in stacks_of(s, pid, native_only=True)
            if any(_PY_ACQUIRE.fullmatch(f.function) for f in st.frames[:8])
        }
        waiting = [
            st
            for st in s.stacks
            if st.pid == pid
            and st.python
            and st.tid in acquiring
            and st.frames
            and st.frames[0].own
        ]
        if len(waiting) < 2:
            continue
        out.append(
            match(
                [f"tid {st.tid} {st.name}: {stack_line(st)}" for st in waiting],
                pid=pid,
                threads=", ".join(f"{st.name} (tid {st.tid})" for st in waiting),
                functions=", ".join(top(st.frames) for st in waiting),
            )
        )
    return out


@dataclass(frozen=True)
class SpinParams:
    # the thresholds of sampling.model.spinning, the rule classify reads too
    busy_fraction: float = BUSY_FRACTION
    runnable_fraction: float = RUNNABLE_FRACTION


@detector(
    "spin-on-blocked-workers",
    params=SpinParams,
    fields=("pid", "tid", "name", "cpu", "where", "blocked"),
)
def spin_on_blocked(seen: Inputs, params: SpinParams) -> list[Match]:
    """Exactly one busy thread in a process whose other threads sit in futex waits."""
    s = seen.samples
    out: list[Match] = []
    for pid in sorted({a.pid for a in s.activity}):
        acts = [a for a in s.activity if a.pid == pid]
        busy = [
            a
            for a in acts
            if spinning(a.states, a.cpu_fraction, params.busy_fraction, params.runnable_fraction)
        ]
        blocked = [a for a in acts if a.cpu_fraction < 0.02 and "futex" in (a.wchan or "")]
        if len(busy) != 1 or not blocked:
            continue
        b = busy[0]
        stack = next((st for st in s.stacks if st.tid == b.tid and not st.python), None)
        evidence = [
            f"tid {b.tid} {b.name}: {b.cpu_fraction * 100:.0f}% of a core, states "
            f"{''.join(b.states)}",
            *(f"tid {a.tid} {a.name}: {a.wchan}, no CPU" for a in blocked[:6]),
        ]
        out.append(
            match(
                evidence,
                pid=pid,
                tid=b.tid,
                name=b.name,
                cpu=f"{b.cpu_fraction * 100:.0f}",
                where=top(stack.frames) if stack else "?",
                blocked=len(blocked),
            )
        )
    return out
