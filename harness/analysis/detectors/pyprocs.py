"""Detectors of hangs between the processes of a (mostly Python) tree: a child blocked
writing a pipe that its waiting parent never reads, a child whose multiprocessing Queue
was never drained before its join, a process pool that lost a worker while its caller waits
for results, and a child forked from a multi-threaded parent that waits on a lock or pool
whose threads stayed in the parent. Each finding is one match (one cause), however many
processes it spans."""

from __future__ import annotations

import re

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.pystacks import (
    child_waiters,
    has_frame,
    live_threads,
    native_stack,
    pipe_writes,
    pool_caller,
    pool_worker_pids,
    pool_workers,
    private_futex_wait,
    python_stack,
    python_stacks,
    wait_site,
)
from harness.analysis.views import OPENMP_MODULES, processes, stacks_of, top, uses
from harness.config.causes import NoParams
from harness.process.signals import signal_name
from harness.sampling.model import ProcessEvent, ProcessSample, SampleSet
from harness.sampling.waits import LOCK_WAITS, POOL_WAITS
from harness.vocab import EventKind, Need

# a multiprocessing Queue's feeder thread, and the exit path that joins it
_FEEDER = {"Queue._feed": "queues.py"}
_FEEDER_JOIN = {"Queue._finalize_join": "queues.py"}
_OPENMP_RUNTIMES = frozenset({"libgomp", "libomp", "libiomp5"})
_COMMAND_CHARS = 70


def command(proc: ProcessSample) -> str:
    """The process's command line on one line, cut to a readable length."""
    text = re.sub(r"\s+", " ", " ".join(proc.cmdline) or proc.name).strip()
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 1] + "…"


def _is_feeder(s: SampleSet, pid: int, tid: int) -> bool:
    return has_frame(python_stack(s, pid, tid), _FEEDER)


@detector(
    "pipe-never-read", fields=("child", "command", "parent", "wait", "pipe", "writer", "where")
)
def pipe_never_read(seen: Inputs, params: NoParams) -> list[Match]:
    """A process blocked writing a pipe whose only readers (as far as the tree shows) are
    processes that wait for it to end (wait4: Popen.wait, Process.join) and never read."""
    s = seen.samples
    procs = processes(s)
    waiters = child_waiters(s)
    out: list[Match] = []
    done: set[int] = set()
    for w in pipe_writes(s):
        child = procs.get(w.pid)
        if child is None or w.pid in done or _is_feeder(s, w.pid, w.tid):
            continue  # a Queue's feeder is queue-not-drained's
        waiting = [(pid, tid) for pid, tid in waiters.get(w.pid, []) if pid in procs]
        if w.readers is not None:
            # the readers are known: every one waits for this child, none is outside
            readers = set(w.readers)
            waiting = [(pid, tid) for pid, tid in waiting if pid in readers]
            if not waiting or not readers <= {pid for pid, _ in waiting}:
                continue
        else:
            # not known (no watch loop, or it could not resolve the pipe's readers): the
            # parent is the reader the child was started for (Popen(stdout=PIPE)); it must be
            # the one waiting, and no sibling may be there to read instead (p1 | p2 started
            # by Popen, the parent in p1.wait(): p2 holds the read end)
            waiting = [(pid, tid) for pid, tid in waiting if pid == child.ppid]
            if not waiting or _siblings(procs, child):
                continue
        parent, tid = waiting[0]
        done.add(w.pid)
        wait = wait_site(s, parent, tid)
        py = python_stack(s, w.pid, w.tid) or native_stack(s, w.pid, w.tid)
        where = top(py.frames) if py else "?"
        evidence = [
            f"pid {w.pid} ({command(child)}) tid {w.tid} blocks writing {w.describe()} in {where}",
            f"pid {parent} tid {tid} waits for pid {w.pid} to end in {wait}, reading nothing",
        ]
        if w.readers is not None:
            evidence.append(f"the read end is held only by pid(s) {', '.join(map(str, w.readers))}")
        else:
            evidence.append(
                "the pipe's readers were not resolved (no watch-loop peers): taken to be the "
                f"parent that started pid {w.pid}, which has no other child that could read it"
            )
        out.append(
            match(
                evidence,
                child=w.pid,
                command=command(child),
                parent=parent,
                wait=wait,
                pipe=w.describe(),
                writer=w.tid,
                where=where,
            )
        )
    return out


@detector("queue-not-drained", fields=("child", "parent", "wait", "feeder", "pipe", "exit"))
def queue_not_drained(seen: Inputs, params: NoParams) -> list[Match]:
    """A child whose multiprocessing Queue feeder thread blocks writing the queue's pipe
    while its main thread waits at exit for that feeder, and a process joins the child."""
    s = seen.samples
    procs = processes(s)
    waiters = child_waiters(s)
    out: list[Match] = []
    done: set[int] = set()
    for w in pipe_writes(s):
        child = procs.get(w.pid)
        if child is None or w.pid in done or not _is_feeder(s, w.pid, w.tid):
            continue
        main = python_stack(s, w.pid, w.pid)
        if not has_frame(main, _FEEDER_JOIN):
            continue  # the child is not at its exit: a slow reader, not this
        waiting = [(pid, tid) for pid, tid in waiters.get(w.pid, []) if pid in procs]
        if not waiting:
            continue
        parent, tid = waiting[0]
        done.add(w.pid)
        wait = wait_site(s, parent, tid)
        joins = [f for f in main.frames if f.function in _FEEDER_JOIN] if main else []
        exit_at = f"Thread.join in {top(joins)}" if joins else "its exit"
        evidence = [
            f"pid {parent} tid {tid} waits for pid {w.pid} to end in {wait}",
            f"pid {w.pid} tid {w.tid} (QueueFeederThread) blocks writing {w.describe()}",
            f"pid {w.pid} main thread waits at exit for its feeder in {exit_at}",
        ]
        out.append(
            match(
                evidence,
                child=w.pid,
                parent=parent,
                wait=wait,
                feeder=w.tid,
                pipe=w.describe(),
                exit=exit_at,
            )
        )
    return out


def _siblings(procs: dict[int, ProcessSample], child: ProcessSample) -> list[int]:
    """The other live children of `child`'s parent: any of them may hold the pipe's read
    end (a pipeline's next stage)."""
    return [
        p.pid
        for p in procs.values()
        if p.ppid == child.ppid and p.pid != child.pid and p.status != "zombie"
    ]


def _how(e: ProcessEvent) -> str:
    if e.signal is not None:
        return f"died by {signal_name(e.signal)}"
    if e.exit_code is not None:
        return f"exited {e.exit_code}"
    return "ended (status not seen: the pool reaped it first)"


@detector(
    "pool-lost-worker",
    needs=(Need.SAMPLES, Need.HISTORY),
    fields=("pool", "parent", "wait", "lost", "left"),
)
def pool_lost_worker(seen: Inputs, params: NoParams) -> list[Match]:
    """A process pool (multiprocessing.Pool, ProcessPoolExecutor) whose caller waits for
    results after a worker ended: one that died, or any that ended while no live worker is
    busy with a task (nobody will ever produce the missing result)."""
    s = seen.samples
    out: list[Match] = []
    for pid in sorted(processes(s)):
        caller = pool_caller(s, pid)
        if caller is None:
            continue
        workers = pool_workers(s, pid)
        busy = [w.pid for w in workers if w.busy]
        idle = [w.pid for w in workers if not w.busy]
        # only pids seen as this pool's workers: another child of the caller that failed or
        # ended (an earlier subprocess.run, a helper) is not a worker the pool lost
        seen_workers = pool_worker_pids(s, pid)
        ended = [
            e
            for e in s.events
            if e.event is EventKind.EXIT and e.ppid == pid and e.pid in seen_workers
        ]
        died = [e for e in ended if e.status_known and (e.signal is not None or e.exit_code)]
        replaced = [w.pid for w in workers if w.replacement]
        if died:
            lost = f"pid {died[-1].pid} {_how(died[-1])} at t={died[-1].t:.1f} s"
        elif busy:
            continue  # a worker is still in a task: slow, not lost (as far as this shows)
        elif ended:
            lost = f"pid {ended[-1].pid} {_how(ended[-1])} at t={ended[-1].t:.1f} s"
        elif replaced:
            lost = (
                f"it ended before the watch loop saw it: pid {replaced[0]} was started by the "
                "pool's worker handler to replace it"
            )
        elif not workers:
            lost = "it ended between two looks: no worker process is alive"
        else:
            continue
        left = (
            f"live worker(s) {', '.join(map(str, idle))} wait idle for tasks"
            if idle and not busy
            else f"live worker(s) {', '.join(map(str, busy + idle))}"
            if workers
            else "no worker is left"
        )
        evidence = [
            f"pid {pid} tid {caller.tid} waits for the {caller.kind}'s results in {caller.wait}",
            f"lost a worker: {lost}",
            f"pid {pid}: {left}",
        ]
        out.append(
            match(evidence, pool=caller.kind, parent=pid, wait=caller.wait, lost=lost, left=left)
        )
    return out


def _threads_at(s: SampleSet, pid: int, t: float | None) -> int:
    """The threads `pid` had at time `t` (the last timeline point at or before it)."""
    before = [pt for pt in s.timeline if t is not None and pt.t <= t]
    counts = [sum(1 for th in pt.threads if th[0] == pid) for pt in before]
    return counts[-1] if counts else 0


def _uses_openmp(s: SampleSet, pid: int) -> bool:
    return any(
        uses(st.frames, OPENMP_MODULES) or any(f.runtime in _OPENMP_RUNTIMES for f in st.frames)
        for st in stacks_of(s, pid)
    )


@detector(
    "fork-with-threads",
    needs=(Need.SAMPLES, Need.HISTORY),
    fields=("child", "parent", "threads", "child_threads", "tid", "wait", "what"),
)
def fork_with_threads(seen: Inputs, params: NoParams) -> list[Match]:
    """A child forked without exec from a multi-threaded parent, whose every live thread
    waits forever on a process-private lock or condition, with fewer threads than the
    parent had: the threads that would release it stayed in the parent (fork() copies only
    the calling thread). The OpenMP case is openmp-after-fork's; a lock cycle, lock-cycle's."""
    s = seen.samples
    procs = processes(s)
    born = {e.pid: e.t for e in s.events if e.event is EventKind.START}
    cycles = {c.pid for c in s.lock_cycles}
    found: dict[tuple[int, str, str], list[tuple[int, int, int, int, list[str]]]] = {}
    for child in procs.values():
        parent = procs.get(child.ppid)
        if parent is None or child.pid in cycles or _uses_openmp(s, child.pid):
            continue
        if child.exe != parent.exe or child.cmdline != parent.cmdline:
            continue  # exec'd another program (or the same one anew): fresh threads
        threads = live_threads(child)
        if not threads or not all(private_futex_wait(th) for th in threads):
            continue
        at_fork = _threads_at(s, parent.pid, born.get(child.pid)) or len(live_threads(parent))
        if at_fork <= len(threads):
            continue  # the parent had no thread the child lacks
        th = threads[0]
        wait = wait_site(s, child.pid, th.tid, LOCK_WAITS)
        py = python_stack(s, child.pid, th.tid)
        if has_frame(py, {k: v for k, v in POOL_WAITS.items() if v == "_base.py"}):
            what = "a concurrent.futures Future whose pool's worker threads stayed in the parent"
        elif has_frame(py, {k: v for k, v in LOCK_WAITS.items() if v == "__init__.py"}):
            what = "a logging lock that a parent thread held at the fork"
        else:
            what = "a lock or condition that only a parent thread could release"
        others = [st for st in python_stacks(s, parent.pid) if st.tid != parent.pid]
        evidence = [
            f"pid {child.pid} is a child of pid {parent.pid} running the same command "
            f"({command(child)}): forked without exec",
            f"pid {parent.pid} had {at_fork} thread(s) when pid {child.pid} was born; "
            f"pid {child.pid} has {len(threads)}",
            f"pid {child.pid} tid {th.tid} waits on a private futex, no timeout, in {wait}",
            *(f"pid {parent.pid} tid {st.tid} {st.name}: {top(st.frames)}" for st in others[:4]),
        ]
        found.setdefault((parent.pid, wait, what), []).append(
            (child.pid, at_fork, len(threads), th.tid, evidence)
        )
    # one finding per parent and wait site: the workers a pool or a DataLoader forked at
    # once inherit the same stale lock, and are one hang, not one per worker
    out: list[Match] = []
    for (parent_pid, wait, what), kids in found.items():
        pid, at_fork, n_threads, tid, evidence = kids[0]
        also = [str(k[0]) for k in kids[1:]]
        child_text = str(pid)
        if also:
            child_text += f" (and {len(also)} more forked the same way: pid {', '.join(also)})"
            evidence = [*evidence, *(f"pid {k[0]} waits in the same place" for k in kids[1:])]
        out.append(
            match(
                evidence,
                child=child_text,
                parent=parent_pid,
                threads=at_fork,
                child_threads=n_threads,
                tid=tid,
                wait=wait,
                what=what,
            )
        )
    return out
