"""Who waits for whom: the wait-for chain from a thread that only waits (for a child, a
result, another thread) to the thread where the chain ends, for the location of a hang and
the report's `waits` line.

A thread is a *waiter* when the call its program made is only a wait: `Popen.wait`,
`Process.join`, `os.waitpid` (a `wait4`/`waitid` by /proc), `Pool.map` and
`AsyncResult.get`, `Future.result`, `Thread.join`, or natively `waitpid`/`pthread_join`
(under glibc's internal names too: `__GI___wait4`).
What it waits for comes from what the watch loop saw (`SampleSet.waits`: "child:PID", the
pipe and its peers) and the process tree (snapshots, births and exits):

- a child wait: the child (the pid of `wait4`, else every child of the process);
- a result wait: the process's other threads and its descendants (a pool's workers, the
  executor's threads); a child that died of a signal meanwhile (a killed pool worker) is
  where such a chain ends when no live thread runs the program's code; with no other
  thread and no child at all (an executor inherited by a fork()ed child) the chain ends
  at the waiter itself: nothing is left to produce its result;
- a thread join: the process's other threads.

The chain follows waiters until it reaches a thread that is not one, preferring, among
the candidates, the thread whose own wait points back into the chain (a write to a pipe
that only a waiter reads), then one in the program's own code. The wait primitives are
named here, not in signatures.toml: they say what a thread waits *for*, which a location
pattern does not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.pystacks import pool_worker_pids
from harness.sampling.model import Frame, SampleSet, ThreadStack
from harness.sampling.waits import CHILD_WAIT, WAIT_CALLS, ThreadWait, Waiter, native_name
from harness.vocab import EventKind, WaitKind, WaitsFor

_IO = re.compile(r"^(write|writev|read|readv)\b")


_BOOTSTRAP = re.compile(r"(BaseProcess\.)?_bootstrap")


def live_frames(stack: ThreadStack) -> ThreadStack:
    """The stack without what a forked multiprocessing child inherited: the frames outward
    of `BaseProcess._bootstrap` are the parent's call to `start()` (its `main` included),
    not code the child runs."""
    for i, frame in enumerate(stack.frames):
        if _BOOTSTRAP.fullmatch(frame.function) and (frame.file or "").endswith(
            "multiprocessing/process.py"
        ):
            if i + 1 < len(stack.frames):
                return dataclasses.replace(stack, frames=stack.frames[: i + 1])
            break
    return stack


def _own_index(frames: Sequence[Frame]) -> int:
    return next((i for i, f in enumerate(frames) if f.own), len(frames))


def waiter(stack: ThreadStack | None, wait: ThreadWait | None) -> Waiter | None:
    """The thread only waits (for a child, a result, a thread): the call the program made
    is one of WAIT_CALLS, or it sits in `wait4`/`waitid` with nothing of its own below.
    `stack` is the thread's Python stack when it has one, else its native one."""
    child = wait.child if wait is not None else None
    if stack is not None:
        frames = stack.frames
        own = _own_index(frames)
        inner = frames[:own]
        # the call the program made is the outermost library frame above its own code;
        # a wait anywhere below it (Popen.wait → _wait → _try_wait) makes the thread a waiter
        for frame in reversed(inner):
            for call in WAIT_CALLS:
                if call.matches(frame.function, frame.file):
                    name = frame.function if call.files else native_name(frame.function)
                    name = name.removeprefix("Base")  # BaseProcess.join: Process.join
                    return Waiter(stack.pid, stack.tid, call.waits_for, name, child)
        if inner and own < len(frames):
            return None  # the program called something else that blocks (a read, a lock)
    if wait is not None and (child is not None or CHILD_WAIT.match(wait.what)):
        return Waiter(wait.pid, wait.tid, WaitsFor.CHILD, "os.waitpid", child)
    return None


# ---------------------------------------------------------------- the chain


@dataclass(frozen=True)
class Link:
    waiter: Waiter
    target: str  # "child pid 101", "its thread 102 ('QueueFeederThread')", "a result"


@dataclass(frozen=True)
class Dead:
    """A process the chain ends at that is gone: a killed pool worker."""

    pid: int
    status: str  # "killed by SIGKILL"
    t: float  # seconds since launch when it was seen gone


@dataclass
class Chain:
    links: list[Link]
    end: tuple[int, int] | None = None  # (pid, tid) of the thread the chain ends at
    dead: Dead | None = None
    # what the end thread does: "blocks writing stdout (pipe:[9]), read only by pid 100"
    doing: str = ""
    # the end thread only waits for input from the chain (a pool worker reading its task
    # pipe, written only by the waiter), in no code of the program: nothing runs there
    idle_end: bool = False
    # the chain ends at its last waiter: it waits for a result and no thread or child of
    # its process is left to produce it (an executor inherited by a fork()ed child)
    stranded: bool = False

    @property
    def pids(self) -> list[int]:
        return [link.waiter.pid for link in self.links]

    def text(self, location: str | None) -> str:
        """`pid 100 waits for child pid 101 in Popen.wait; pid 101 blocks writing stdout
        (pipe:[9]), read only by pid 100: located in chatter`."""
        parts = []
        for link in self.links:
            w = link.waiter
            who = f"pid {w.pid}" if w.pid == w.tid else f"pid {w.pid} tid {w.tid}"
            parts.append(f"{who} waits for {link.target} in {w.call}")
        text = "; ".join(parts)
        if self.dead is not None:
            d = self.dead
            return f"{text}; pid {d.pid}, its child, was {d.status} at {d.t:.1f}s"
        if self.doing and self.end is not None:
            pid, tid = self.end
            who = f"pid {pid}" if pid == tid else f"pid {pid} tid {tid}"
            idle = " (it waits for the chain: nothing of the program runs there)"
            text = f"{text}; {who} {self.doing}" + (idle if self.idle_end else "")
            return text + (f": located in {location}" if location else "")
        return text + (f", which is blocked in {location}" if location else "")


@dataclass
class _Tree:
    samples: SampleSet
    stacks: dict[tuple[int, int], ThreadStack]
    waits: dict[tuple[int, int], ThreadWait]
    parent: dict[int, int]
    threads: dict[int, list[int]]  # pid → tids (live)

    def children(self, pid: int) -> list[int]:
        return sorted(p for p, pp in self.parent.items() if pp == pid and p in self.threads)

    def descendants(self, pid: int) -> list[int]:
        out, todo = [], self.children(pid)
        while todo:
            p = todo.pop(0)
            if p not in out:
                out.append(p)
                todo += self.children(p)
        return out

    def name(self, pid: int, tid: int) -> str:
        st = self.stacks.get((pid, tid))
        return st.name if st is not None else ""


def _tree(samples: SampleSet) -> _Tree:
    stacks: dict[tuple[int, int], ThreadStack] = {}
    for st in samples.stacks:  # the Python stack of a thread first: it names the call
        if (st.pid, st.tid) not in stacks or st.python:
            stacks[(st.pid, st.tid)] = live_frames(st)
    parent: dict[int, int] = {e.pid: e.ppid for e in samples.events}
    threads: dict[int, list[int]] = {}
    last = samples.snapshots[-1] if samples.snapshots else None
    for proc in last.processes if last is not None else []:
        parent[proc.pid] = proc.ppid
        threads[proc.pid] = [t.tid for t in proc.threads if t.state not in "ZX"]
    for a in samples.activity:
        if not a.states or a.states[-1] not in "ZX":
            threads.setdefault(a.pid, [])
            if a.tid not in threads[a.pid]:
                threads[a.pid].append(a.tid)
    waits = {(w.pid, w.tid): w for w in samples.waits}
    return _Tree(samples, stacks, waits, parent, threads)


def waiters(samples: SampleSet) -> dict[tuple[int, int], Waiter]:
    tree = _tree(samples)
    found = {}
    for pid, tids in tree.threads.items():
        for tid in tids:
            w = waiter(tree.stacks.get((pid, tid)), tree.waits.get((pid, tid)))
            if w is not None:
                found[(pid, tid)] = w
    return found


def follow(samples: SampleSet | None) -> Chain | None:
    """The wait-for chain from the outermost waiter of the tree, or None without one."""
    if samples is None:
        return None
    tree = _tree(samples)
    found = waiters(samples)
    if not found:
        return None

    def depth(pid: int) -> int:
        n, seen = 0, set()
        while pid in tree.parent and pid not in seen:
            seen.add(pid)
            pid, n = tree.parent[pid], n + 1
        return n

    key = min(found, key=lambda k: (depth(k[0]), k[0] != k[1], k))
    chain = Chain([])
    seen: set[tuple[int, int]] = set()
    while key in found and key not in seen:
        seen.add(key)
        w = found[key]
        candidates, target = _targets(w, tree)
        chain.links.append(Link(w, target))
        nxt = [c for c in candidates if c in found and c not in seen]
        if nxt:
            key = nxt[0]
            continue
        live = [c for c in candidates if c not in found]
        dead = _dead_child(w, tree) if w.waits_for is WaitsFor.RESULT else None
        if dead is not None and not any(_runs_own(tree, c) for c in live):
            chain.dead = dead
            return chain
        if live:
            chain.end = _best(live, chain, tree)
            chain.doing = _doing(chain.end, chain, tree)
            chain.idle_end = _waits_for_chain(chain.end, chain, tree)
        elif not candidates and w.waits_for is WaitsFor.RESULT:
            # a result wait with no other thread and no child (a fork() copies one thread):
            # nothing can ever set it, so this waiter is where the hang sits
            chain.end, chain.stranded = key, True
            chain.doing = "has no other thread and no child process to produce it"
        return chain
    return chain


def _targets(w: Waiter, tree: _Tree) -> tuple[list[tuple[int, int]], str]:
    """The threads `w` waits for, and the words for them."""
    if w.waits_for is WaitsFor.CHILD:
        kids = [w.child] if w.child is not None else tree.children(w.pid)
        kids = [k for k in kids if k in tree.threads]
        words = ", ".join(f"pid {k}" for k in kids) or "a child"
        return [(k, t) for k in kids for t in _main_first(k, tree)], f"child {words}"
    others = [(w.pid, t) for t in tree.threads.get(w.pid, []) if t != w.tid]
    if w.waits_for is WaitsFor.THREAD:
        return others, "another thread"
    below = [(p, t) for p in tree.descendants(w.pid) for t in _main_first(p, tree)]
    return [*below, *others], "a result"


def _main_first(pid: int, tree: _Tree) -> list[int]:
    return sorted(tree.threads.get(pid, []), key=lambda t: (t != pid, t))


def _runs_own(tree: _Tree, key: tuple[int, int]) -> bool:
    st = tree.stacks.get(key)
    return st is not None and any(f.own for f in st.frames)


def _dead_child(w: Waiter, tree: _Tree) -> Dead | None:
    """A process below the waiter that died of a signal or exited with a failure, or a
    worker of a process pool that ended unseen. A pool reaps its dead worker itself, so the
    harness sees it gone, status unknown; any other child gone without a seen status (an
    earlier subprocess.run, reaped by its caller) most likely ended normally: no death."""
    below = set(tree.descendants(w.pid)) | {e.pid for e in tree.samples.events if e.ppid == w.pid}
    workers: dict[int, set[int]] = {}  # pool owner → the pids seen as its pool's workers
    for e in tree.samples.events:
        if e.event is not EventKind.EXIT or e.pid not in below:
            continue
        failed = e.signal is not None or e.exit_code not in (None, 0)
        if not failed and not e.status_known:
            if e.ppid not in workers:
                workers[e.ppid] = pool_worker_pids(tree.samples, e.ppid)
            failed = e.pid in workers[e.ppid]
        if failed:
            return Dead(e.pid, e.status or "gone", e.t)
    return None


def _waits_for_chain(end: tuple[int, int], chain: Chain, tree: _Tree) -> bool:
    wait = tree.waits.get(end)
    if wait is None or _runs_own(tree, end) or not wait.peers:
        return False
    m = _IO.match(wait.what)
    return m is not None and m[1].startswith("read") and set(wait.peers) <= set(chain.pids)


def _best(live: list[tuple[int, int]], chain: Chain, tree: _Tree) -> tuple[int, int]:
    """The thread the chain ends at: one whose own wait points back into the chain first
    (a write to a pipe only a waiter reads), then one in the program's own code, then one
    in a wait of its own (not a timer), then the first."""
    upstream = set(chain.pids)

    def rank(key: tuple[int, int]) -> tuple[int, int, int]:
        wait = tree.waits.get(key)
        back = wait is not None and bool(set(wait.peers) & upstream)
        timed = wait is not None and wait.kind in (WaitKind.TIMED, WaitKind.HOUSEKEEPING)
        return (not back, not _runs_own(tree, key), timed)

    return min(live, key=rank)


def _doing(end: tuple[int, int], chain: Chain, tree: _Tree) -> str:
    """What the end thread does, in words, when its wait says more than a location."""
    wait = tree.waits.get(end)
    if wait is None:
        return ""
    m = _IO.match(wait.what)
    if m is None:
        return ""
    verb = "writing" if m[1].startswith("write") else "reading"
    what = _fd_name(end, tree) or "a pipe"
    if wait.on:
        what = f"{what} ({wait.on})" if what != "a pipe" else wait.on
    peers = ", ".join(f"pid {p}" for p in wait.peers)
    side = "read" if verb == "writing" else "written"
    # "only" when the rule saw every other end in the tree: an OUTSIDE wait has one elsewhere
    if peers and wait.kind is WaitKind.TREE:
        only = f", {side} only by {peers}"
    elif peers and wait.kind is WaitKind.OUTSIDE:
        only = f", {side} by {peers} and outside the tree"
    elif peers:
        only = f", {side} by {peers}"
    else:
        only = ""
    name = tree.name(*end)
    thread = f" (thread '{name}')" if end[0] != end[1] and name else ""
    return f"blocks {verb} {what}{only}{thread}"


def _fd_name(key: tuple[int, int], tree: _Tree) -> str:
    """'stdout' for a write on fd 1, 'stderr' on fd 2, from the last snapshot's args."""
    last = tree.samples.snapshots[-1] if tree.samples.snapshots else None
    for proc in last.processes if last is not None else []:
        for th in proc.threads if proc.pid == key[0] else []:
            if th.tid == key[1] and th.syscall_args:
                return {0: "stdin", 1: "stdout", 2: "stderr"}.get(th.syscall_args[0], "")
    return ""


def program_calls(samples: SampleSet) -> dict[tuple[int, int], str]:
    """Where each sampled thread's wait sits in the program's terms: the library call its
    own code made and the line that made it (`Popen.communicate at t.py:3`), or its own
    innermost frame when it waits in its own code; the Python stack first. For the wake
    chain's links (one chain, kernel edges with program frames)."""
    out: dict[tuple[int, int], str] = {}
    for stack in sorted(samples.stacks, key=lambda st: not st.python):
        key = (stack.pid, stack.tid)
        frames = live_frames(stack).frames
        own = _own_index(frames)
        if key in out or own >= len(frames):
            continue
        site = frames[own]
        where = f" at {Path(site.file).name}:{site.line}" if site.file and site.line else ""
        called = frames[own - 1].function if own > 0 else site.function
        if called == "??" or called.startswith("__"):  # no symbol, or libc's inner name
            called = site.function
        out[key] = f"{called}{where}"
    return out
