"""Lock-order hazards: a cycle in a process's lock-order graph (native mutexes from the
shim's E records, threading's locks from the hook's `edge` events; each process and each
kind a graph of its own). An edge held → taken says some thread took `taken` while holding
`held`, with both call sites; a cycle says two (or more) threads taking those locks at the
same time, each in its own order, would each hold one and wait for the next: a deadlock
this run's timing happened not to meet. Only blocking acquisitions make edges (a trylock or a
timed lock cannot wait for ever: lockdep's rule)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from harness.hazards.context import Context, py_site
from harness.hazards.model import Hazard, Site
from harness.hazards.records import Edge
from harness.vocab import HazardKind

MAX_CYCLE = 4  # locks in a cycle looked for
MAX_CYCLES = 16  # cycles reported per process
MAX_STEPS = 200_000  # edges walked per process: a large graph is searched this far, no further

CONSEQUENCE = (
    "two threads taking these locks at the same time, each in its own order, deadlock: each "
    "holds one and waits for the other (this run's timing did not make them meet)"
)


@dataclass(frozen=True)
class _Step:
    held: Hashable
    taken: Hashable
    thread: str
    held_site: Site
    taken_site: Site
    via: Site | None  # the first own frame that is not the taken site's function


def _cycles(steps: list[_Step]) -> Iterator[list[_Step]]:
    """Every cycle of at most MAX_CYCLE locks, each set of locks once."""
    graph: dict[Hashable, list[_Step]] = {}
    for s in steps:
        graph.setdefault(s.held, []).append(s)
    seen: set[frozenset[Hashable]] = set()
    budget = MAX_STEPS
    for start in sorted(graph, key=str):
        stack: list[tuple[Hashable, list[_Step]]] = [(start, [])]
        while stack and budget > 0:
            node, path = stack.pop()
            for s in graph.get(node, []):
                budget -= 1
                if s.taken == start:
                    cycle = [*path, s]
                    locks = frozenset(x.held for x in cycle)
                    if locks not in seen:
                        seen.add(locks)
                        yield cycle
                elif (
                    len(path) + 1 < MAX_CYCLE
                    and s.taken != node
                    and all(s.taken != p.held for p in path)
                    and str(s.taken) > str(start)  # each cycle from its smallest lock only
                ):
                    stack.append((s.taken, [*path, s]))


def _add_cycles(ctx: Context, pid: int, steps: list[_Step], names: dict[Hashable, str]) -> None:
    for n, cycle in enumerate(_cycles(steps)):
        if n >= MAX_CYCLES:
            break
        orders = []
        for s in cycle:
            via = f", via {s.via.label()}" if s.via else ""
            orders.append(
                f"{names.get(s.held, '?')} at {s.held_site.label()} then {names.get(s.taken, '?')} "
                f"at {s.taken_site.label()} (thread {s.thread}{via})"
            )
        first = cycle[0]
        chain = " → ".join([names.get(s.held, "?") for s in cycle] + [names.get(first.held, "?")])
        sites = [x for s in cycle for x in (s.held_site, s.taken_site)]
        locations = [n for x in sites for n in x.names()] + [names.get(s.held, "") for s in cycle]
        ctx.add(
            Hazard(
                kind=HazardKind.LOCK_ORDER,
                where=first.taken_site.label(),
                summary=f"lock-order cycle {chain} ({len(cycle)} orders), first at "
                f"{first.taken_site.label()}",
                consequence=CONSEQUENCE,
                pid=pid,
                location=first.taken_site.function,
                locations=list(dict.fromkeys(x for x in locations if x)),
                cycle=orders,
                sites=sites,
            )
        )


def native_cycles(ctx: Context) -> None:
    per_pid: dict[int, list[Edge]] = {}
    for e in ctx.rec.edges:
        per_pid.setdefault(e.pid, []).append(e)
    for pid, group in per_pid.items():
        ctx.sites(pid, [a for e in group for a in (e.held_site, e.taken_site, *e.stack)])
        names: dict[Hashable, str] = {}
        for e in group:
            for lock in (e.held, e.taken):
                names[lock] = ctx.variable(pid, lock[0])
        steps = []
        for e in group:
            taken = ctx.site(pid, e.taken_site)
            stack = ctx.stack(pid, e.stack)
            if not ctx.own(taken):  # inside a library (std::mutex::lock): its first own caller
                taken = ctx.first_own(stack) or taken
            held = ctx.site(pid, e.held_site)
            if not ctx.own(held):
                held = taken if taken.function == held.function else held
            via = next((s for s in stack if ctx.own(s) and s.function != taken.function), None)
            steps.append(_Step(e.held, e.taken, e.thread, held, taken, via))
        _add_cycles(ctx, pid, steps, names)


def python_cycles(ctx: Context) -> None:
    per_pid: dict[int, list[dict[str, Any]]] = {}
    for e in ctx.rec.py_edges:
        per_pid.setdefault(int(e.get("pid") or 0), []).append(e)
    for pid, group in per_pid.items():
        names: dict[Hashable, str] = {}
        steps = []
        for e in group:
            try:
                (h, hname), (t, tname) = e["held"], e["taken"]
                hs, ts = py_site(e["held_site"]), py_site(e["taken_site"])
            except (KeyError, ValueError, TypeError):
                continue
            if hs is None or ts is None or not isinstance(h, int) or not isinstance(t, int):
                continue
            names[("py", h)] = f"the Lock made at {hname}" if hname else f"lock #{h}"
            names[("py", t)] = f"the Lock made at {tname}" if tname else f"lock #{t}"
            thread = str(e.get("thread") or e.get("tid") or "?")
            steps.append(_Step(("py", h), ("py", t), thread, hs, ts, None))
        _add_cycles(ctx, pid, steps, names)
