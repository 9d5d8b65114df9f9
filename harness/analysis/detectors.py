"""The detectors of the cause rules (harness/data/causes.toml): each looks at what a run
left (stacks, the watch loop's lineage and exit statuses, lock cycles, the output) and
returns one match per finding, with the fields its rule's sentence and remedies use."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.sampling.model import Frame, ProcessSample, SampleSet, ThreadStack

OPENMP_MODULES = re.compile(r"lib(gomp|omp|iomp5)\.so")
WAIT_FUNCTIONS = re.compile(
    r"(recv\w*|read|poll|ppoll|select|pselect\d*|epoll_wait|wait4|waitpid|waitid)"
    r"|(\w+\.)?(recv|_recv|_recv_bytes|poll|wait|get|_poll)"
)
# glibc's internal names of the same calls: __GI___libc_read, __libc_recv, __poll …
_GLIBC_PREFIX = re.compile(r"^(__GI_)?_*(libc_)?")


def _waits(function: str) -> bool:
    return bool(WAIT_FUNCTIONS.fullmatch(_GLIBC_PREFIX.sub("", function)))


SHUTDOWN_FUNCTIONS = re.compile(
    r"(_shutdown|_*pthread_join.*|__libc_start_call_main|exit|_*run_exit_handlers)"
)


@dataclass(frozen=True)
class Facts:
    """What a run left, as the detectors see it."""

    kind: str
    mechanism: str | None
    location: str | None
    samples: SampleSet | None
    output_tail: Sequence[str]
    env: str | None = None
    variant: str = "stock"
    fixes: tuple[str, ...] = ("omp-free",)  # variants that test a fix, for {compare}
    # the run's own options that {compare} must repeat (--pin, --checkout, --env …)
    compare_args: str = ""
    report_dir: Path = Path(".")


Match = dict[str, Any]  # a detector's fields; "evidence": list[str] is kept apart
Detector = Callable[[Facts, Mapping[str, Any]], list[Match]]


# ---------------------------------------------------------------- helpers over the samples


def _processes(s: SampleSet) -> dict[int, ProcessSample]:
    """The last sighting of every process sampled."""
    seen: dict[int, ProcessSample] = {}
    for snap in s.snapshots:
        for p in snap.processes:
            seen[p.pid] = p
    return seen


def _stacks_of(s: SampleSet, pid: int, native_only: bool = False) -> list[ThreadStack]:
    return [st for st in s.stacks if st.pid == pid and not (native_only and st.python)]


def _uses(frames: Iterable[Frame], pattern: re.Pattern[str]) -> str | None:
    for f in frames:
        base = (f.module or "").rsplit("/", 1)[-1]
        if pattern.search(base):
            return base
    return None


def _top(frames: Sequence[Frame], skip: re.Pattern[str] | None = None) -> str:
    """The innermost own frame (the program's code), else the innermost named one."""
    own = [f for f in frames if f.own]
    for f in own or frames:
        if f.function != "??" and not (skip and skip.fullmatch(f.function)):
            where = f" ({f.file.rsplit('/', 1)[-1]}:{f.line})" if f.file and f.line else ""
            return f"{f.function}{where}"
    return "??"


def _stack_line(st: ThreadStack, n: int = 4) -> str:
    return " ← ".join(f.function for f in st.frames[:n])


# ---------------------------------------------------------------- detectors


def detect_openmp_after_fork(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    procs = _processes(s)
    starts = {e.pid: e.t for e in s.events if e.event == "start"}
    out: list[Match] = []
    for child in procs.values():
        parent = procs.get(child.ppid)
        if parent is None:
            continue
        child_stacks = _stacks_of(s, child.pid, native_only=True)
        runtime = next((r for st in child_stacks if (r := _uses(st.frames, OPENMP_MODULES))), None)
        if runtime is None:
            continue
        team = [st for st in _stacks_of(s, parent.pid, native_only=True) if st.tid != parent.pid]
        team = [st for st in team if _uses(st.frames, OPENMP_MODULES)]
        born = starts.get(child.pid)
        before = [pt for pt in s.timeline if born is not None and pt.t <= born]
        threads_before = max(
            (sum(1 for th in pt.threads if th[0] == parent.pid) for pt in before), default=0
        )
        if not team and threads_before <= 1:
            continue  # the parent never ran a team (as far as anything shows)
        if child.exe and parent.exe and child.exe != parent.exe:
            continue  # the child exec'd another program: a fresh runtime, no hazard
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
        stuck = next(st for st in child_stacks if _uses(st.frames, OPENMP_MODULES))
        evidence.append(f"pid {child.pid} tid {stuck.tid}: {_stack_line(stuck)}")
        out.append(
            {
                "child": child.pid,
                "child_name": child.name,
                "parent": parent.pid,
                "team": size,
                "runtime": runtime,
                "evidence": evidence,
            }
        )
    return out


def detect_lock_cycle(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    out: list[Match] = []
    for cycle in s.lock_cycles:
        links = [
            f"{link.name} (tid {link.tid}) waits for mutex {link.mutex} held by "
            f"{link.owner_name} (tid {link.owner})"
            for link in cycle.links
        ]
        out.append({"pid": cycle.pid, "cycle": "; ".join(links), "evidence": links})
    return out


_PY_ACQUIRE = re.compile(r"PyThread_acquire_lock\w*|acquire_timed|lock_PyThread_acquire_lock")


def detect_python_locks(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    """Python threads blocked acquiring a lock in the program's own code (their native
    stack is in CPython's lock acquire, their Python stack's innermost frame is own code,
    not threading.py's join or Condition.wait)."""
    s = facts.samples
    if s is None:
        return []
    out: list[Match] = []
    for pid in sorted({st.pid for st in s.stacks if st.python}):
        acquiring = {
            st.tid
            for st in _stacks_of(s, pid, native_only=True)
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
            {
                "pid": pid,
                "threads": ", ".join(f"{st.name} (tid {st.tid})" for st in waiting),
                "functions": ", ".join(_top(st.frames) for st in waiting),
                "evidence": [f"tid {st.tid} {st.name}: {_stack_line(st)}" for st in waiting],
            }
        )
    return out


def detect_dead_worker(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    procs = _processes(s)
    out: list[Match] = []
    for e in s.events:
        # only a death the watch loop saw the status of: a process that merely vanished
        # between two looks ("status unknown") may have ended normally, reaped by its parent
        if e.event != "exit" or not (
            e.status.startswith("killed by")
            or (
                e.status.startswith("exited ")
                and e.status.split()[1].isdigit()
                and e.status != "exited 0"
            )
        ):
            continue
        parent = procs.get(e.ppid)
        if parent is None:
            continue
        waits = [
            st for st in _stacks_of(s, parent.pid) if any(_waits(f.function) for f in st.frames[:6])
        ]
        if not waits:
            continue
        where = next(f.function for f in waits[0].frames if _waits(f.function))
        out.append(
            {
                "pid": e.pid,
                "name": e.name,
                "status": e.status.replace("killed", "died", 1),
                "t": f"{e.t:.1f}",
                "parent": parent.pid,
                "wait": where,
                "evidence": [
                    f"pid {e.pid} ({e.name}), a child of pid {e.ppid}: {e.status} at t={e.t:.1f}s",
                    f"pid {parent.pid} tid {waits[0].tid}: {_stack_line(waits[0])}",
                ],
            }
        )
    return out


def detect_exit_blocked(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    out: list[Match] = []
    for proc in _processes(s).values():
        stacks = _stacks_of(s, proc.pid)
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
        where = "exited" if proc.status == "zombie" or not main else _top(main[0].frames)
        threads = "; ".join(f"{st.name} (tid {st.tid}) in {_top(st.frames)}" for st in others[:6])
        out.append(
            {
                "pid": proc.pid,
                "where": where,
                "threads": threads,
                "evidence": [f"tid {st.tid} {st.name}: {_stack_line(st)}" for st in others[:6]],
            }
        )
    return out


def detect_spin_on_blocked(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    out: list[Match] = []
    busy_min = float(params.get("busy_fraction", 0.5))
    for pid in sorted({a.pid for a in s.activity}):
        acts = [a for a in s.activity if a.pid == pid]
        busy = [a for a in acts if a.cpu_fraction >= busy_min]
        blocked = [a for a in acts if a.cpu_fraction < 0.02 and "futex" in (a.wchan or "")]
        if len(busy) != 1 or not blocked:
            continue
        b = busy[0]
        stack = next((st for st in s.stacks if st.tid == b.tid and not st.python), None)
        out.append(
            {
                "pid": pid,
                "tid": b.tid,
                "name": b.name,
                "cpu": f"{b.cpu_fraction * 100:.0f}",
                "where": _top(stack.frames) if stack else "?",
                "blocked": len(blocked),
                "evidence": [
                    f"tid {b.tid} {b.name}: {b.cpu_fraction * 100:.0f}% of a core, states "
                    f"{''.join(b.states)}",
                    *(f"tid {a.tid} {a.name}: {a.wchan}, no CPU" for a in blocked[:6]),
                ],
            }
        )
    return out


def detect_output(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    rx = re.compile(str(params["regex"]))
    for line in reversed(facts.output_tail):
        m = rx.search(line)
        if m:
            return [
                {**m.groupdict(), "line": line.strip(), "evidence": [f"output: {line.strip()}"]}
            ]
    return []


def detect_frames(facts: Facts, params: Mapping[str, Any]) -> list[Match]:
    s = facts.samples
    if s is None:
        return []
    patterns = [re.compile(p) for p in params.get("functions", ())]
    for st in s.stacks:
        for f in st.frames:
            if any(p.fullmatch(f.function) for p in patterns):
                return [
                    {
                        "function": f.function,
                        "tid": st.tid,
                        "pid": st.pid,
                        "evidence": [f"pid {st.pid} tid {st.tid}: {_stack_line(st, 6)}"],
                    }
                ]
    return []


DETECTORS: dict[str, Detector] = {
    "openmp-after-fork": detect_openmp_after_fork,
    "lock-cycle": detect_lock_cycle,
    "python-locks": detect_python_locks,
    "dead-worker": detect_dead_worker,
    "exit-blocked": detect_exit_blocked,
    "spin-on-blocked-workers": detect_spin_on_blocked,
    "output": detect_output,
    "frames": detect_frames,
}
