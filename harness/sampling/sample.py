"""Sample every thread of a process tree: /proc states, CPU use, native and Python stacks.

The watchdog calls `sample_tree` when it suspects a hang; `classify` reads the result.
Everything here is bounded and must leave the target as it found it:

- each external tool (the stack tools of sampling/tools.py) runs in its own session with a
  timeout and is killed as a whole process group when it overruns;
- a process that a killed tracer left in group-stop is sent SIGCONT (only if it was not
  stopped before we looked: a process stopped by someone else is evidence, not our mess);
- processes and threads that vanish while we look are skipped, never raised about;
- a missing tool, a ptrace refusal or a timeout becomes an entry in `tools`/`notes`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from harness.sampling import callranks, locks, runtimes
from harness.sampling.model import LockCycle, LockLink, ProcessSample, SampleSet, Snapshot
from harness.sampling.procfs import compute_activity, last_seen, snapshot, take_snapshots
from harness.sampling.ranks import read_ranks
from harness.sampling.stacks import collect_stacks, plan_tools
from harness.vocab import AUTO, StackToolName

# With history, the CPU activity must span at least this long (a trigger in the first
# moments of a run tops it up with fresh snapshots, at the caller's interval).
MIN_HISTORY_SPAN_S = 0.5


def sample_tree(
    root_pid: int,
    *,
    snapshots: int = 3,
    interval: float = 0.5,
    stack_timeout: float = 10.0,
    native: str = AUTO,
    python: str = AUTO,
    own_roots: Sequence[str] = (),
    py_native: bool = False,
    history: Sequence[Snapshot] | None = None,
    origin: float | None = None,
) -> SampleSet:
    """Snapshot every thread of root_pid's tree `snapshots` times, then take stacks once.

    With `history` (the watch loop's recent snapshots, oldest first, their `t` in seconds
    since `origin`, a time.monotonic()), no new snapshot is taken when they span at least
    MIN_HISTORY_SPAN_S: the stacks are taken at once and the CPU activity comes from them.

    Never raises for anything the target or the tools do; see `tools` and `notes`.
    The stack phase is bounded by about 3 × stack_timeout in all.
    """
    t0 = time.monotonic()
    result = SampleSet([], [], [], {}, [], 0.0)
    plan = plan_tools(native, python, result)
    if history:
        result.snapshots = _top_up(root_pid, list(history), interval, origin or t0)
    else:
        result.snapshots = take_snapshots(root_pid, max(1, snapshots), interval, t0)
    result.activity = compute_activity(result.snapshots)
    last = last_seen(result.snapshots)
    # before the stacks, while each process's environ is still readable
    result.ranks = read_ranks(last)
    if not last:
        result.notes.append(f"pid {root_pid}: no process left to sample")
    elif plan.python is None and plan.python_wanted and any(p.is_python for p in last):
        for tool in plan.python_wanted:
            result.tools[tool.name] = "missing"
        names = ", ".join(t.name for t in plan.python_wanted)
        result.notes.append(f"{names} not found: no Python stacks")
    t_stacks = time.monotonic()
    result.timings["snapshots"] = t_stacks - t0
    plan.py_native, plan.timeout = py_native, stack_timeout
    plan.deadline = t_stacks + 3 * stack_timeout
    roots = tuple(os.path.realpath(r) for r in own_roots)
    collect_stacks(last, plan, roots, result)
    # a rank no launcher told (torch.multiprocessing.spawn): from its init_process_group
    # call, with the locals of the ranks in torch.distributed (sampling/callranks.py)
    py_spy = plan.paths.get(StackToolName.PY_SPY) if plan.python is not None else None
    result.ranks += callranks.read_call_ranks(last, result, py_spy, plan.deadline)
    # what runtime each frame's module is (a wheel's renamed libgomp too), while the
    # processes still map their files; bounded in files and time (sampling/runtimes.py)
    t_runtimes = time.monotonic()
    runtimes.label_stacks(result.stacks, result.notes, budget_s=max(1.0, stack_timeout / 2))
    result.timings["runtimes"] = round(time.monotonic() - t_runtimes, 4)
    result.lock_cycles = lock_cycles(last, result)
    result.duration_s = time.monotonic() - t0
    result.timings["stacks"] = (
        result.duration_s - result.timings["snapshots"] - result.timings["runtimes"]
    )
    return result


MAX_LOCK_PROCESSES = 8  # the futex owners of this many processes are read, at most


def lock_cycles(
    processes: Sequence[ProcessSample], result: SampleSet, *, python: bool = False
) -> list[LockCycle]:
    """The mutex wait-for cycles of the native processes (with `python`, the Python ones:
    a ctypes call or C extension deadlocked on mutexes, as the pytest plugin reads them)
    that have a thread in a futex wait, read while they are still alive (the owners are in
    their memory); the lock reader's notes go to `result`."""
    cycles: list[LockCycle] = []
    waiting = [
        p
        for p in processes
        if p.is_python == python and any(t.wchan.startswith("futex") for t in p.threads)
    ]
    for proc in waiting[:MAX_LOCK_PROCESSES]:
        graph = locks.lock_graph(proc.pid)
        result.notes += [n for n in graph.notes if n not in result.notes]
        for cycle in graph.cycles:
            links = [
                LockLink(
                    step.tid,
                    step.name,
                    "?" if step.mutex is None else hex(step.mutex),
                    nxt.tid,
                    nxt.name,
                )
                for step, nxt in zip(cycle, [*cycle[1:], cycle[0]], strict=True)
            ]
            cycles.append(LockCycle(proc.pid, links))
    return cycles


def _top_up(root_pid: int, snaps: list[Snapshot], interval: float, origin: float) -> list[Snapshot]:
    """The history, with fresh snapshots added until it spans MIN_HISTORY_SPAN_S."""
    step = min(interval, MIN_HISTORY_SPAN_S / 2)
    while snaps[-1].t - snaps[0].t < MIN_HISTORY_SPAN_S - 1e-6:
        time.sleep(max(0.0, min(step, snaps[0].t + MIN_HISTORY_SPAN_S - snaps[-1].t)))
        snaps.append(snapshot(root_pid, origin))
    return snaps
