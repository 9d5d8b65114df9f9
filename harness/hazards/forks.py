"""Fork hazards: a fork without exec beside other live threads, told from the records of
both recorders (the shim's F/S/T/H/P/C/X, the hook's `fork` and `child` events; one fork
seen by both is one hazard, with the native and the Python stacks).

When a fork is a hazard (docs/hazards.md, "Forks"):

- its child entered an OpenMP runtime on its forking thread while the parent had a team
  alive (`fork-after-openmp`): GNU libgomp deadlocks there; LLVM's libomp re-initialises,
  which is why such a run can pass;
- its child took a lock another thread held at the fork (or, in Python, waited for one);
- the process is a Python interpreter and other threads were alive (CPython itself warns
  of it from 3.12: the child runs on, and any lock those threads held stays taken in it).

A fork whose child exec'd at once (subprocess's fork+exec) is none; nor one of a native
program whose child touched neither the runtime nor a lock held at the fork: it is counted
as a safe fork (the `fixed` replica forks beside a parked OpenMP pool, and its child never
enters the runtime)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.hazards.context import FRAMES_SHOWN, Context, py_lock_name, py_site, py_sites
from harness.hazards.model import Hazard, Site, ThreadAtFork
from harness.hazards.records import Fork
from harness.sampling.runtimes import OPENMP_RUNTIMES
from harness.vocab import HazardKind

_STDLIB = re.compile(r"/lib/python3\.\d+/|^<frozen ")

TEAM_CHILD = {
    "libgomp": "with GNU libgomp (this build's runtime) the child deadlocks there: libgomp "
    "keeps the parent's thread pool after fork, and those threads do not exist in the child",
    "other": "with GNU libgomp the child deadlocks there (gcc's runtime keeps the parent's "
    "thread pool after fork, and those threads do not exist in the child); {rt} "
    "re-initialises itself after fork, which is why this run passed",
}
TEAM_PYTHON = (
    "the child inherits {rt} with a pool whose threads do not exist in it: with GNU libgomp its "
    "first parallel region on this thread deadlocks, and a lock a pool thread held stays taken"
)
THREADS_PYTHON = (
    "the child has only the forking thread: a lock another thread held at that moment (the "
    "allocator's, logging's, a queue's, the program's own) stays locked in the child for "
    "ever, and the child hangs when it takes it; CPython 3.12 warns of this "
    "(DeprecationWarning)"
)
TOOK = (
    "the child took (or waited for) a lock another thread held at the fork: the child's copy "
    "of a lock taken at the fork never comes free, so whenever the fork lands while it is "
    "held the child hangs"
)


def _stdlib(path: str) -> bool:
    return bool(_STDLIB.search(path)) and "-packages/" not in path


def _py_place(py: dict[str, Any] | None) -> Site | None:
    """The innermost Python frame outside the standard library (multiprocessing, os) and
    outside the hook itself."""
    frames = py.get("stack") if py else None
    for fr in frames if isinstance(frames, list) else []:
        if isinstance(fr, list) and len(fr) == 3:
            path = str(fr[0])
            if not _stdlib(path) and not path.endswith("sitecustomize.py"):
                return py_site(fr)
    return None


@dataclass
class _Fork:
    """One fork as both recorders saw it (either may be missing)."""

    pid: int
    native: Fork | None
    py: dict[str, Any] | None
    py_child: dict[str, Any] | None


def _threads(ctx: Context, f: _Fork) -> list[ThreadAtFork]:
    """The other threads: the shim's (start routine, runtime, mutexes held), named and given
    Python stacks and locks where the hook knew them."""
    fk, py = f.native, f.py
    py_threads = {
        t.get("native_id"): t for t in (py or {}).get("threads", []) if isinstance(t, dict)
    }
    out: list[ThreadAtFork] = []
    held_by: dict[int, list[str]] = {}
    if fk is not None:
        for tid, lock, site in fk.held:
            held_by.setdefault(tid, []).append(
                f"{ctx.variable(fk.pid, lock)} at {ctx.site(fk.pid, site).label()}"
            )
        starts = ctx.sites(fk.pid, [s + 1 for _, s, _ in fk.threads])  # +1: not a return address
        for (tid, start, name), where in zip(fk.threads, starts, strict=True):
            runtime = ctx.runtime_at(fk.pid, start)
            # a runtime's thread routine is a static function: no symbol names it
            what = f"{runtime} pool thread" if runtime in OPENMP_RUNTIMES else where.function
            out.append(
                ThreadAtFork(tid, name, what if start else "", runtime, [], held_by.get(tid, []))
            )
    native_tids = {t.tid for t in out}
    for py_tid, t in py_threads.items():
        held = [
            f"{py_lock_name(h.get('lock'), 0)} at {at.label()}"
            for h in t.get("held", [])
            if isinstance(h, dict) and (at := py_site(h.get("site"))) is not None
        ]
        name, target = str(t.get("name", "")), str(t.get("target", ""))
        stack = py_sites(t.get("stack"))[:FRAMES_SHOWN]
        if py_tid in native_tids:
            i = next(i for i, x in enumerate(out) if x.tid == py_tid)
            x = out[i]
            out[i] = ThreadAtFork(
                x.tid, name or x.name, target or x.start, x.runtime, stack, x.held + held
            )
        elif isinstance(py_tid, int):
            out.append(ThreadAtFork(py_tid, name, target, "", stack, held))
    return out


def _child(ctx: Context, f: _Fork, team: str) -> tuple[str, list[Site], bool, bool]:
    """What the child did before exec, in words; the sites that name it; whether it entered
    the runtime on its forking thread; whether it took (or waited for) a lock held at the
    fork."""
    said: list[str] = []
    sites: list[Site] = []
    entered = took = False
    fk = f.native
    for d in fk.child_did if fk is not None else []:
        assert fk is not None
        where = ctx.site(fk.pid, d.site)  # the child's code is its parent's, at the same place
        if d.what == "omp" and d.main:
            entered = True
            sites.insert(0, where)  # the summary names the first site: this one
            said.append(
                f"entered {team or 'the OpenMP runtime'} at {where.label()} on its forking thread"
            )
        elif d.what == "omp":
            said.append(f"ran a parallel region at {where.label()} from a thread of its own (safe)")
        elif d.what == "lock":
            took = True
            sites.append(where)
            said.append(f"took {ctx.variable(fk.pid, d.arg)}, held at the fork, at {where.label()}")
    if f.py_child is not None:
        took = True
        held_at = py_site(f.py_child.get("held_site"))
        at = py_site(f.py_child.get("site"))
        if at is not None:
            sites.append(at)
        lock, holder = py_lock_name(f.py_child.get("lock"), 0), f.py_child.get("holder", "?")
        said.append(
            f"waited for {lock} (thread {holder} held it at "
            f"{held_at.label() if held_at else '?'}) at {at.label() if at else '?'}"
        )
    if fk is not None and fk.child_exec:
        said.append("then exec'd")
    return (
        ", ".join(said) + (" before any exec" if said and not (fk and fk.child_exec) else ""),
        sites,
        entered,
        took,
    )


def _one(ctx: Context, f: _Fork) -> bool:
    """The hazard of one fork, added to ctx; False for a safe fork."""
    fk, py = f.native, f.py
    if fk is not None and fk.child_exec and not fk.child_did and f.py_child is None:
        return False  # fork+exec: nothing of the parent's state runs in the child
    threads = _threads(ctx, f)
    team = next((t.runtime for t in threads if t.runtime in OPENMP_RUNTIMES), "")
    child, child_sites, entered, took = _child(ctx, f, team)
    python = py is not None or ctx.is_python(f.pid)
    if not ((team and entered) or took or (python and threads)):
        return False
    stack = ctx.stack(fk.pid, fk.stack) if fk else []
    py_stack = py_sites(py.get("stack")) if py else []
    place = _py_place(py) or ctx.first_own(stack) or (stack[0] if stack else Site("fork"))
    held = sum(len(t.held) for t in threads)
    if team:
        size = sum(1 for t in threads if t.runtime == team) + 1
        kind = HazardKind.FORK_AFTER_OPENMP
        what = f"fork() with an OpenMP team of {size} alive ({team})"
        if entered:
            consequence = TEAM_CHILD["libgomp" if team == "libgomp" else "other"].format(rt=team)
        elif took:
            consequence = TOOK
        else:
            consequence = TEAM_PYTHON.format(rt=team)
    else:
        kind = HazardKind.FORK_WITH_THREADS
        n = len(threads)
        what = f"fork() with {n} other thread{'s' if n != 1 else ''} alive"
        consequence = TOOK if took else THREADS_PYTHON
    if held:
        what += f", {held} lock{'s' if held != 1 else ''} held by them"
    entry = f", its child entering the runtime at {child_sites[0].label()}" if entered else ""
    names = place.names() + [n for s in child_sites for n in s.names()]
    ctx.add(
        Hazard(
            kind=kind,
            where=place.label(),
            summary=f"{what} at {place.label()}{entry}",
            consequence=consequence + (f"; here the child {child}" if child else ""),
            pid=f.pid,
            location=place.function,
            locations=list(dict.fromkeys(names)),
            trigger=child_sites[0].function if child_sites else place.function,
            stack=stack[:FRAMES_SHOWN],
            python_stack=py_stack[:FRAMES_SHOWN],
            threads=threads,
            runtime=team,
            child=child,
        )
    )
    return True


def fork_hazards(ctx: Context) -> tuple[int, int]:
    """Every fork of the run judged; (forks seen, safe forks)."""
    rec = ctx.rec
    py_by: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for p in rec.py_forks:  # in order: the n-th of a thread is its n-th native fork
        py_by.setdefault((_int(p.get("pid")), _int(p.get("tid"))), []).append(p)
    children = {(_int(c.get("parent")), _int(c.get("seq"))): c for c in rec.py_children}
    views = []
    for fk in rec.forks:
        same = py_by.get((fk.pid, fk.tid))
        py = same.pop(0) if same else None
        views.append(_Fork(fk.pid, fk, py, _child_of(children, py)))
    for rest in py_by.values():  # forks the shim did not see (no LD_PRELOAD in that process)
        views += [_Fork(_int(py.get("pid")), None, py, _child_of(children, py)) for py in rest]
    safe = sum(1 for v in views if not _one(ctx, v))
    return len(views), safe


def _child_of(
    children: dict[tuple[int, int], dict[str, Any]], py: dict[str, Any] | None
) -> dict[str, Any] | None:
    if py is None:
        return None
    return children.get((_int(py.get("pid")), _int(py.get("seq"))))


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
