"""Sample every thread of a process tree: /proc states, CPU use, native and Python stacks.

The watchdog calls `sample_tree` when it suspects a hang; `classify` reads the result.
Everything here is bounded and must leave the target as it found it:

- each external tool (gdb, eu-stack, py-spy) runs in its own session with a timeout and
  is killed as a whole process group when it overruns;
- a process that a killed tracer left in group-stop is sent SIGCONT (only if it was not
  stopped before we looked: a process stopped by someone else is evidence, not our mess);
- processes and threads that vanish while we look are skipped, never raised about;
- a missing tool, a ptrace refusal or a timeout becomes an entry in `tools`/`notes`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from harness.sampling.model import SampleSet
from harness.sampling.procfs import compute_activity, last_seen, take_snapshots
from harness.sampling.stacks import collect_stacks, plan_tools


def sample_tree(
    root_pid: int,
    *,
    snapshots: int = 3,
    interval: float = 0.5,
    stack_timeout: float = 10.0,
    native: str = "auto",
    python: str = "auto",
    own_roots: Sequence[str] = (),
    py_native: bool = False,
) -> SampleSet:
    """Snapshot every thread of root_pid's tree `snapshots` times, then take stacks once.

    Never raises for anything the target or the tools do; see `tools` and `notes`.
    The stack phase is bounded by about 3 × stack_timeout in all.
    """
    t0 = time.monotonic()
    result = SampleSet([], [], [], {}, [], 0.0)
    plan = plan_tools(native, python, result)
    result.snapshots = take_snapshots(root_pid, max(1, snapshots), interval, t0)
    result.activity = compute_activity(result.snapshots)
    last = last_seen(result.snapshots)
    if not last:
        result.notes.append(f"pid {root_pid}: no process left to sample")
    elif plan.python is None and python != "none" and any(p.is_python for p in last):
        result.tools["py-spy"] = "missing"
        result.notes.append("py-spy not found: no Python stacks")
    t_stacks = time.monotonic()
    result.timings["snapshots"] = t_stacks - t0
    plan.py_native, plan.timeout = py_native, stack_timeout
    plan.deadline = t_stacks + 3 * stack_timeout
    roots = tuple(os.path.realpath(r) for r in own_roots)
    collect_stacks(last, plan, roots, result)
    result.duration_s = time.monotonic() - t0
    result.timings["stacks"] = result.duration_s - result.timings["snapshots"]
    return result
