"""Lock-order hazards: a cycle in a process's lock-order graph (native mutexes from the
shim's E records, threading's locks from the hook's `edge` events; each process and each
kind a graph of its own). An edge held → taken says some thread took `taken` while holding
`held`, with both call sites; a cycle says two (or more) threads taking those locks at the
same time, each in its own order, would each hold one and wait for the next: a deadlock
this run's timing happened not to meet. Only blocking acquisitions make edges (a trylock or a
timed lock cannot wait for ever: lockdep's rule).

A cycle is reported only when its orders were taken by two threads or more. One thread
taking a then b, later b then a, cannot deadlock with itself; and where a heap mutex goes
away without pthread_mutex_destroy (C++'s std::mutex is destroyed by no call at all) and
another comes at its address, one thread's unrelated locks chain into cycles that no two
threads could ever close: PufferLib 3.0.0's libtorch shows such cycles in every run."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from harness.hazards.context import Context, py_lock_name, py_site
from harness.hazards.model import Hazard, Site
from harness.hazards.records import Edge
from harness.vocab import HazardKind

MAX_CYCLE = 4  # locks in a cycle looked for
MAX_CYCLES = 16  # cycles reported per process
MAX_STEPS = 200_000  # edges walked per process: a large graph is searched this far, no further

CONSEQUENCE = (
    "two threads taking these locks at the same time, each in its own order, deadlock: each "
    "holds one and waits for the other; in a run that passes, the timing did not make them meet"
)


@dataclass(frozen=True)
class _Step:
    held: Hashable
    taken: Hashable
    tid: int
    thread: str
    held_site: Site
    taken_site: Site
    via: Site | None  # the first own frame that is not the taken site's function


def _cycles(edges: list[tuple[Hashable, Hashable]]) -> Iterator[list[int]]:
    """Every cycle of at most MAX_CYCLE locks, each set of locks once, as indexes of
    `edges` (held, taken) in order."""
    graph: dict[Hashable, list[int]] = {}
    for i, (held, _) in enumerate(edges):
        graph.setdefault(held, []).append(i)
    seen: set[frozenset[Hashable]] = set()
    budget = MAX_STEPS
    for start in sorted(graph, key=str):
        stack: list[tuple[Hashable, list[int]]] = [(start, [])]
        while stack and budget > 0:
            node, path = stack.pop()
            for i in graph.get(node, []):
                budget -= 1
                taken = edges[i][1]
                if taken == start:
                    locks = frozenset(edges[j][0] for j in [*path, i])
                    if locks not in seen:
                        seen.add(locks)
                        yield [*path, i]
                elif (
                    len(path) + 1 < MAX_CYCLE
                    and taken != node
                    and all(taken != edges[j][0] for j in path)
                    and str(taken) > str(start)  # each cycle from its smallest lock only
                ):
                    stack.append((taken, [*path, i]))


def _add_cycle(ctx: Context, pid: int, cycle: list[_Step], names: dict[Hashable, str]) -> None:
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
            trigger=first.taken_site.function,
            locations=list(dict.fromkeys(x for x in locations if x)),
            cycle=orders,
            sites=sites,
        )
    )


def _native_step(ctx: Context, e: Edge) -> _Step:
    """One edge named: its call sites (a library's own lock call named by its first own
    caller: std::mutex::lock inlined, a logging library's wrapper), the stack's own frame."""
    pid = e.pid
    ctx.sites(pid, [e.held_site, e.taken_site, *e.stack])
    taken = ctx.site(pid, e.taken_site)
    stack = ctx.stack(pid, e.stack)
    if not ctx.own(taken):
        taken = ctx.first_own(stack) or taken
    held = ctx.site(pid, e.held_site)
    if not ctx.own(held):
        held = taken if taken.function == held.function else held
    via = next((s for s in stack if ctx.own(s) and s.function != taken.function), None)
    return _Step(e.held, e.taken, e.tid, e.thread, held, taken, via)


def native_cycles(ctx: Context) -> None:
    """The cycles of each process's mutex graph; only their edges and locks are named (a
    Python process has edges of the interpreter's own mutexes, never in a cycle)."""
    per_pid: dict[int, list[Edge]] = {}
    for e in ctx.rec.edges:
        per_pid.setdefault(e.pid, []).append(e)
    for pid, group in per_pid.items():
        pairs: list[tuple[Hashable, Hashable]] = [(e.held, e.taken) for e in group]
        cycles = (c for c in _cycles(pairs) if len({group[i].tid for i in c}) > 1)
        for n, cycle in enumerate(cycles):
            if n >= MAX_CYCLES:
                break
            steps = [_native_step(ctx, group[i]) for i in cycle]
            names: dict[Hashable, str] = {}
            for s in steps:
                for lock in (s.held, s.taken):
                    assert isinstance(lock, tuple)
                    names[lock] = ctx.variable(pid, lock[0])
            _add_cycle(ctx, pid, steps, names)


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
            names[("py", h)] = py_lock_name(hname, h)
            names[("py", t)] = py_lock_name(tname, t)
            thread = str(e.get("thread") or e.get("tid") or "?")
            tid = e["tid"] if isinstance(e.get("tid"), int) else 0
            steps.append(_Step(("py", h), ("py", t), tid, thread, hs, ts, None))
        pairs = [(s.held, s.taken) for s in steps]
        cycles = (c for c in _cycles(pairs) if len({steps[i].tid for i in c}) > 1)
        for n, cycle in enumerate(cycles):
            if n >= MAX_CYCLES:
                break
            _add_cycle(ctx, pid, [steps[i] for i in cycle], names)
