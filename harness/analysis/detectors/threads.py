"""Detectors over threads waiting on each other: a mutex wait-for cycle, Python threads
blocked acquiring locks, one thread spinning while the ones it waits for are blocked."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# mpi tells a thread polling its MPI progress engine (a wait) from a spin
from harness.analysis.detectors.mpi import is_mpi_progress
from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.views import stack_line, stacks_of, top
from harness.config.causes import NoParams
from harness.sampling.model import (
    BUSY_FRACTION,
    RUNNABLE_FRACTION,
    Frame,
    SampleSet,
    ThreadStack,
    spinning,
)
from harness.sampling.pysource import function_at, parse_tree, source_line
from harness.vocab import WaitKind


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
# the stdlib frames that take a lock themselves (the innermost Python frame of a waiter):
# function → the lock, as the holders' frames name it (see _canonical)
_LOCK_FRAMES = {
    "_acquireLock": "logging._lock",  # logging's module lock (3.11, 3.12)
    "Handler.acquire": "Handler.lock",  # a logging handler's lock
    "_RLock.acquire": "",  # the Python RLock: which one is its caller's business
    "RLock.acquire": "",
    "Condition.__enter__": "",
}
# the stdlib's waits on a threading.Condition (innermost frame Condition.wait) that count as
# lock waits: what each waits for, and the call that would end it. A Condition has no
# owner: only a notify() by another thread ends the wait, so these count only while no
# other thread of the process could make that call (python_locks)
_CONDITIONS = {
    "Queue.join": "a queue's unfinished tasks to reach 0 (task_done() ends it)",
    "Queue.get": "an item in an empty queue (put() ends it)",
    "Queue.put": "room in a full queue (get() ends it)",
}
# a consumer idle at an empty queue is how every worker pool waits for work: never a
# finding by itself, only listed beside one (the consumer a Queue.join waits for)
_IDLE_WAITS = frozenset({"Queue.get"})
# a thread that used this share of a core between snapshots still runs: it may release a
# lock or notify (spin-on-blocked-workers calls a thread under it blocked, too)
_ACTIVE_FRACTION = 0.02
# waits that end by no act of the process's own (docs/quiescence.md): the thread is stuck
_STUCK = (WaitKind.TREE, WaitKind.DONE)
# stdlib files whose lock statements are read to tell what their frames hold: logging's
# locks are the ones public reports deadlock on (CPython #96727); threading/queue frames
# hold per-call locks (a Condition's waiter) whose names would match across threads
_READ_STDLIB = re.compile(r"/logging/(__init__|config|handlers)\.py$")


@dataclass(frozen=True)
class _Held:
    lock: str
    where: str  # "file:line" of the statement that took it


@dataclass(frozen=True)
class _LockWait:
    tid: int
    name: str
    site: str  # the lock-taking frame: "Handler.acquire (__init__.py:927)"
    statement: str  # its source line, "" when unreadable
    lock: str  # what it waits for, as holders name it ("" unknown)
    kind: str  # "_thread.RLock", "_thread.lock", "lock"
    own: str  # the innermost frame of the program's own code
    held: tuple[_Held, ...]
    notify: bool = False  # a Condition wait: ended by a notify, no owner
    idle: bool = False  # a consumer at an empty queue (_IDLE_WAITS): no finding by itself


def _lock_of(call: ast.Call) -> tuple[str, int] | None:
    """(lock expression, +1 acquire / -1 release) of a call statement, if it is one."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name in ("_acquireLock", "_releaseLock"):  # logging's module-lock helpers
        return "_lock", 1 if name == "_acquireLock" else -1
    if isinstance(f, ast.Attribute) and name in ("acquire", "release"):
        return ast.unparse(f.value), 1 if name == "acquire" else -1
    return None


def _canonical(expr: str, path: str) -> str:
    """One name for one lock across frames: logging's as the module names them, the
    program's as `expr (file)`."""
    if _READ_STDLIB.search(path):
        expr = expr.removeprefix("logging.")
        if expr == "_lock":
            return "logging._lock"
        if expr in ("self", "h", "handler", "self.lock", "h.lock", "handler.lock"):
            return "Handler.lock"
    return f"{expr} in {path.rsplit('/', 1)[-1]}"


def _locks_at(path: str, line: int) -> tuple[list[str], list[_Held]]:
    """What the statement at `line` of `path` acquires, and what its function holds there
    (enclosing `with X:` blocks; `X.acquire()` earlier in it not yet released), read from
    the source: CPython records no owner readable from outside, the holder's code does."""
    tree = parse_tree(path)
    fn = function_at(tree, line) if tree is not None else None
    if fn is None:
        return [], []
    here: list[str] = []
    balance: dict[str, list[int]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.With | ast.AsyncWith):
            exprs = [ast.unparse(i.context_expr) for i in node.items]
            if node.lineno == line:
                here += exprs
            elif node.lineno < line <= (node.end_lineno or node.lineno):
                for e in exprs:
                    balance.setdefault(e, []).append(node.lineno)
        elif isinstance(node, ast.Call) and (lock := _lock_of(node)) is not None:
            expr, step = lock
            if node.lineno == line and step > 0:
                here.append(expr)
            elif node.lineno < line:
                taken = balance.setdefault(expr, [])
                if step > 0:
                    taken.append(node.lineno)
                elif taken:
                    taken.pop()
    name = path.rsplit("/", 1)[-1]
    held = [
        _Held(_canonical(e, path), f"{name}:{n}") for e, lines in balance.items() for n in lines
    ]
    return [_canonical(e, path) for e in here], held


def _reads(f: Frame) -> bool:
    return (
        bool(f.file) and f.line is not None and (f.own or bool(_READ_STDLIB.search(f.file or "")))
    )


def _lock_wait(st: ThreadStack, kind: str) -> _LockWait | None:
    """The lock-taking frame of a thread blocked in CPython's lock acquire, with the lock
    and what the thread holds; None when its innermost frame takes no lock (a Thread.join,
    an Event.wait)."""
    inner = st.frames[0]
    caller = st.frames[1] if len(st.frames) > 1 else None
    if inner.function == "Condition.wait" and caller is not None:
        return _condition_wait(st, caller)
    if inner.function in _LOCK_FRAMES:
        lock = _LOCK_FRAMES[inner.function]
    elif inner.own:
        lock = ""
    else:
        return None
    path, line = inner.file or "", inner.line or 0
    # the line as written, without its comment (a `#` inside a string is cut too: display only)
    statement = source_line(path, line).split("#", 1)[0].strip()
    if not lock and _reads(inner):
        here, _ = _locks_at(path, line)
        lock = here[-1] if here else ""
    held: list[_Held] = []
    for f in st.frames[1:] if inner.function in _LOCK_FRAMES else st.frames:
        if _reads(f):
            held += _locks_at(f.file or "", f.line or 0)[1]
    return _LockWait(
        st.tid, st.name, top([inner]), statement, lock, kind, top(st.frames), tuple(held)
    )


def _condition_wait(st: ThreadStack, caller: Frame) -> _LockWait | None:
    """A wait on a Condition: the queue's, or one the program's own code waits on (its
    line names it); None for the others (Event.wait, Barrier.wait, a pool's internals)."""
    if caller.function in _CONDITIONS:
        what = _CONDITIONS[caller.function]
    elif caller.own:
        what = "a notify()"
    else:
        return None
    path, line = caller.file or "", caller.line or 0
    statement = source_line(path, line).split("#", 1)[0].strip()
    if caller.own and statement:
        what = f"a notify() on {statement.removesuffix('.wait()').split('.wait(')[0]}"
    site, own = top([caller]), top(st.frames)
    idle = caller.function in _IDLE_WAITS
    kind = "threading.Condition"
    return _LockWait(st.tid, st.name, site, statement, what, kind, own, (), True, idle)


def _owner(w: _LockWait, others: list[_LockWait]) -> _LockWait | None:
    holders = [o for o in others if o.tid != w.tid and any(h.lock == w.lock for h in o.held)]
    return holders[0] if w.lock and not w.notify and len(holders) == 1 else None


def _describe(w: _LockWait, owner: _LockWait | None) -> str:
    what = w.lock or "a lock"
    where = f"{w.site}: `{w.statement}`" if w.statement else w.site
    if w.notify:
        return f"{w.name} (tid {w.tid}) waits for {what} at {where} (a Condition: no owner)"
    if owner is None:
        return (
            f"{w.name} (tid {w.tid}) waits for {what} (a {w.kind}) at {where}: owner unknown "
            "(no holder's frame shows it taken, and CPython records no owner readable from outside)"
        )
    since = next(h.where for h in owner.held if h.lock == w.lock)
    return (
        f"{w.name} (tid {w.tid}) waits for {what} (a {w.kind}) at {where}, held by "
        f"{owner.name} (tid {owner.tid}) since {since} (read from its stack)"
    )


@detector("python-locks", fields=("pid", "threads", "functions", "locks", "cycle"))
def python_locks(seen: Inputs, params: NoParams) -> list[Match]:
    """Python threads blocked in CPython's lock acquire at a lock-taking frame (the
    program's own `with lock:` / `lock.acquire()` line, logging's `_acquireLock` and
    `Handler.acquire`, a Python RLock, a Condition the program or a queue.Queue waits on:
    join, put; get only beside another), each with the lock it waits for and, where its
    holder's frames show it, the owner; "owner unknown" otherwise (CPython's C locks record
    no owner readable from outside). A finding needs a cycle read from the stacks, or waits
    that no other thread of the process can end (none of them runs, sleeps on a timer or
    waits outside the tree); Condition waits count only then."""
    s = seen.samples
    out: list[Match] = []
    for pid in sorted({st.pid for st in s.stacks if st.python}):
        kinds: dict[int, str] = {}
        for st in stacks_of(s, pid, native_only=True):
            names = [f.function for f in st.frames[:8]]
            if any(_PY_ACQUIRE.fullmatch(n) for n in names):
                kinds[st.tid] = "_thread.RLock" if "rlock_acquire" in names else "_thread.lock"
        by_tid = {st.tid: st for st in s.stacks if st.pid == pid and st.python}
        waits = [
            w
            for st in s.stacks
            if st.pid == pid and st.python and st.tid in kinds and st.frames
            if (w := _lock_wait(st, kinds[st.tid])) is not None
        ]
        free = _free_threads(s, pid, {w.tid for w in waits})
        core = [w for w in waits if not w.idle]
        if free:  # a thread that still runs may notify or put: Condition waits are no finding
            waits = core = [w for w in core if not w.notify]
        owners = {w.tid: _owner(w, waits) for w in waits}
        cycle = _cycle(waits, owners)
        if free and (len(core) < 2 or not cycle.startswith("a lock-order cycle")):
            continue  # no cycle, and a thread that still runs may release or notify
        if not free and len(core) < 2 and not any(w.notify for w in core):
            continue  # one lock wait, or only consumers idle at their queues
        locks = [_describe(w, owners[w.tid]) for w in waits]
        out.append(
            match(
                [*(f"tid {w.tid} {w.name}: {stack_line(by_tid[w.tid])}" for w in waits), *locks],
                pid=pid,
                threads=", ".join(f"{w.name} (tid {w.tid})" for w in waits),
                functions=", ".join(w.own for w in waits),
                locks="; ".join(locks),
                cycle=cycle,
            )
        )
    return out


def _free_threads(s: SampleSet, pid: int, waiting: set[int]) -> list[int]:
    """The live threads of `pid` outside `waiting` that may still act (release a lock, put
    or notify): one that used CPU, was runnable, or whose wait the watch loop saw end by
    itself (a timer, an fd outside the tree). A thread stuck on the tree (a join, an
    untimed wait) is none."""
    kinds = {w.tid: w.kind for w in s.waits if w.pid == pid}
    free = []
    for a in s.activity:
        if a.pid != pid or a.tid in waiting or not a.states or a.states[-1] in "ZX":
            continue
        ran = a.cpu_fraction >= _ACTIVE_FRACTION or "R" in a.states
        if ran or (a.tid in kinds and kinds[a.tid] not in _STUCK):
            free.append(a.tid)
    return free


def _cycle(waits: list[_LockWait], owners: dict[int, _LockWait | None]) -> str:
    """ "a → b → a" when the owners read from the stacks close a wait-for cycle; ""."""
    for start in waits:
        path, at = [start], owners[start.tid]
        while at is not None and at not in path:
            path.append(at)
            at = owners[at.tid]
        if at is start and len(path) > 1:
            steps = " → ".join(f"{w.name} (tid {w.tid})" for w in [*path, start])
            return f"a lock-order cycle: {steps}"
    return "no wait-for cycle read from their stacks"


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
    """Exactly one busy thread in a process whose other threads sit in futex waits; not an
    MPI rank, nor a thread in an MPI call (MPICH and Open MPI spin in their progress engine
    while waiting for a peer: that is mpi-peers-blocked's finding)."""
    s = seen.samples
    out: list[Match] = []
    # an MPI rank's CPU between looks may be its progress engine polling, even when the
    # last look finds it elsewhere (its own sleep between exchanges): never this finding
    mpi_ranks = {r.pid for r in s.ranks if r.launcher == "mpi"}
    for pid in sorted({a.pid for a in s.activity} - mpi_ranks):
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
        if stack is not None and is_mpi_progress(stack.frames):
            continue  # an MPI rank polls its progress engine while it waits (mpi-peers-blocked)
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
