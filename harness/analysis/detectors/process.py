"""Detectors over the process tree: a fork after an OpenMP team, a worker that died while
its parent waits for it, a process whose main thread finished while others keep it alive."""

from __future__ import annotations

import re

from harness.analysis.detectors.registry import Inputs, Match, detector, match

# dead-worker leaves a Python pool's lost worker to pool-lost-worker (one cause per finding)
from harness.analysis.pystacks import pool_caller
from harness.analysis.views import (
    OPENMP_MODULES,
    processes,
    stack_line,
    stacks_of,
    top,
    uses,
    waits,
)
from harness.config.causes import NoParams
from harness.process.signals import signal_name
from harness.sampling.model import ThreadStack, WakeChain
from harness.vocab import EventKind, Need, WakeEnd

# a main thread in its exit path, or joining its threads (Python's threading._shutdown).
# Not __libc_start_call_main: it is the outermost frame of every main thread, so it would be
# in the first 8 frames of any shallow stack (a main spinning or waiting in its own code)
SHUTDOWN_FUNCTIONS = re.compile(r"(_shutdown|_*pthread_join.*|exit|_*run_exit_handlers)")


# a multiprocessing child started by spawn or forkserver runs the parent's python binary but
# exec'd it anew ("-c 'from multiprocessing.spawn import spawn_main; spawn_main(…)'
# --multiprocessing-fork", or the forkserver's own process): its OpenMP runtime is fresh
_STARTED_ANEW = re.compile(r"spawn_main|--multiprocessing-fork|forkserver")


def _started_anew(cmdline: list[str]) -> bool:
    return any(_STARTED_ANEW.search(arg) for arg in cmdline)


@detector(
    "openmp-after-fork",
    needs=(Need.SAMPLES, Need.HISTORY),
    fields=("child", "child_name", "parent", "team", "runtime"),
)
def openmp_after_fork(seen: Inputs, params: NoParams) -> list[Match]:
    """A child running the parent's executable (fork without exec: not a multiprocessing
    spawn or forkserver child, which exec'd it afresh) stuck in an OpenMP runtime, whose
    parent ran a team before the fork."""
    s = seen.samples
    procs = processes(s)
    starts = {e.pid: e.t for e in s.events if e.event is EventKind.START}
    out: list[Match] = []
    for child in procs.values():
        parent = procs.get(child.ppid)
        if parent is None:
            continue
        child_stacks = stacks_of(s, child.pid, native_only=True)
        runtime = next((r for st in child_stacks if (r := uses(st.frames, OPENMP_MODULES))), None)
        if runtime is None:
            continue
        team = [st for st in stacks_of(s, parent.pid, native_only=True) if st.tid != parent.pid]
        team = [st for st in team if uses(st.frames, OPENMP_MODULES)]
        born = starts.get(child.pid)
        before = [pt for pt in s.timeline if born is not None and pt.t <= born]
        threads_before = max(
            (sum(1 for th in pt.threads if th[0] == parent.pid) for pt in before), default=0
        )
        if not team and threads_before <= 1:
            continue  # the parent never ran a team (as far as anything shows)
        if child.exe and parent.exe and child.exe != parent.exe:
            continue  # the child exec'd another program: a fresh runtime, no hazard
        if _started_anew(child.cmdline):
            continue  # multiprocessing spawn/forkserver: the same python, exec'd afresh
        size = max(len(team) + 1, threads_before)
        evidence = [
            f"pid {child.pid} ({child.name}) is a child of pid {parent.pid} ({parent.name}) "
            f"running the same executable {child.exe or '?'} (fork without exec)",
            f"pid {parent.pid} has an OpenMP team: {size} thread(s), "
            f"{len(team)} of them in {runtime} frames",
        ]
        if born is not None and threads_before > 1:
            evidence.append(
                f"pid {child.pid} was born at t={born:.1f}s, when pid {parent.pid} already had "
                f"{threads_before} threads"
            )
        elif born is not None:  # both were there at the first look: the order is not seen
            evidence.append(f"pid {child.pid} was first seen at t={born:.1f}s")
        stuck = next(st for st in child_stacks if uses(st.frames, OPENMP_MODULES))
        evidence.append(f"pid {child.pid} tid {stuck.tid}: {stack_line(stuck)}")
        out.append(
            match(
                evidence,
                child=child.pid,
                child_name=child.name,
                parent=parent.pid,
                team=size,
                runtime=runtime,
            )
        )
    return out


def _held_by_sleeper(wake: WakeChain | None, pid: int) -> bool:
    """The wake graph proves what the parent waits on held by a live process that sleeps
    past the run's limit (a chain from the parent ending `late`): a child that died is not
    what keeps that wait (a `sleep 600 &` holds the pipe of the shell that was killed)."""
    return (
        wake is not None
        and wake.end is WakeEnd.LATE
        and bool(wake.links)
        and wake.links[0].pid == pid
    )


@detector(
    "dead-worker",
    needs=(Need.SAMPLES, Need.HISTORY),
    fields=("pid", "name", "status", "t", "parent", "wait"),
)
def dead_worker(seen: Inputs, params: NoParams) -> list[Match]:
    """A child that died (a signal, a non-zero exit) while its parent waits in a read, a
    poll or a waitpid, on something the child could have ended (not a private futex: the
    wake graph's `private`). Not a worker of a Python process pool whose caller waits for
    its results: that is pool-lost-worker's finding."""
    s = seen.samples
    procs = processes(s)
    out: list[Match] = []
    for e in s.events:
        # only a death whose status the watch loop saw: a process that merely vanished
        # between two looks may have ended normally, reaped by its parent
        if e.event is not EventKind.EXIT or not e.status_known:
            continue
        if e.signal is not None:
            died = f"died by {signal_name(e.signal)}"
        elif e.exit_code:
            died = f"exited {e.exit_code}"
        else:
            continue
        parent = procs.get(e.ppid)
        if parent is None or pool_caller(s, parent.pid) is not None:
            continue
        if _held_by_sleeper(s.wake, parent.pid):
            continue
        # a wait on its own process's memory alone (a private futex: a lock, a condition)
        # is one the child could never have ended, alive or dead: the parent waits on
        # something else (a deadlock of its own threads, say), not on the dead child
        own = {(w.pid, w.tid) for w in s.waits if w.pid == parent.pid and w.private}
        waiting = [
            st
            for st in stacks_of(s, parent.pid)
            if (st.pid, st.tid) not in own and any(waits(f.function) for f in st.frames[:6])
        ]
        if not waiting:
            continue
        where = next(f.function for f in waiting[0].frames if waits(f.function))
        evidence = [
            f"pid {e.pid} ({e.name}), a child of pid {e.ppid}: {e.status} at t={e.t:.1f}s",
            f"pid {parent.pid} tid {waiting[0].tid}: {stack_line(waiting[0])}",
        ]
        out.append(
            match(
                evidence,
                pid=e.pid,
                name=e.name,
                status=died,
                t=f"{e.t:.1f}",
                parent=parent.pid,
                wait=where,
            )
        )
    return out


@detector("exit-blocked", fields=("pid", "where", "threads"))
def exit_blocked(seen: Inputs, params: NoParams) -> list[Match]:
    """A process whose main thread finished (a zombie, or in its exit path) while other
    threads live on."""
    s = seen.samples
    out: list[Match] = []
    for proc in processes(s).values():
        stacks = stacks_of(s, proc.pid)
        main = [st for st in stacks if st.tid == proc.pid]
        main_done = proc.status == "zombie" or any(
            any(SHUTDOWN_FUNCTIONS.fullmatch(f.function) for f in st.frames[:8]) for st in main
        )
        # one stack per thread: the Python one where py-spy gave it
        by_tid: dict[int, ThreadStack] = {}
        for st in stacks:
            if st.tid != proc.pid and (st.tid not in by_tid or st.python):
                by_tid[st.tid] = st
        others = list(by_tid.values())
        if not main_done or not others:
            continue
        where = "exited" if proc.status == "zombie" or not main else top(main[0].frames)
        threads = "; ".join(f"{st.name} (tid {st.tid}) in {top(st.frames)}" for st in others[:6])
        evidence = [f"tid {st.tid} {st.name}: {stack_line(st)}" for st in others[:6]]
        out.append(match(evidence, pid=proc.pid, where=where, threads=threads))
    return out
