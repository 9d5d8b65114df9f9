"""Sample sets built by hand for the tests of what reads them (classify, the detectors,
the wake graph's causes, the console): one builder with the empty defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.sampling.model import (
    ProcessEvent,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadSample,
    ThreadStack,
    WakeChain,
)
from harness.sampling.ranks import ProcessRank
from harness.sampling.waits import ThreadWait


def sample_set(
    snapshots: Sequence[Snapshot] = (),
    activity: Sequence[ThreadActivity] = (),
    stacks: Sequence[ThreadStack] = (),
    *,
    tools: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    duration_s: float = 0.0,
    events: Sequence[ProcessEvent] = (),
    waits: Sequence[ThreadWait] = (),
    ranks: Sequence[ProcessRank] = (),
    wake: WakeChain | None = None,
) -> SampleSet:
    """A SampleSet of what is given, empty elsewhere (no tool run, no notes, 0 s); each
    sequence is copied into a list of its own."""
    return SampleSet(
        list(snapshots),
        list(activity),
        list(stacks),
        dict(tools or {}),
        list(notes),
        duration_s,
        events=list(events),
        waits=list(waits),
        ranks=list(ranks),
        wake=wake,
    )


FUTEX_NR = 202  # x86-64
FUTEX_WAIT_PRIVATE = 128  # FUTEX_WAIT | FUTEX_PRIVATE_FLAG


def thread(
    tid: int,
    state: str = "S",
    nr: int | str = FUTEX_NR,
    args: tuple[int, ...] = (0x1000, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0),
    cpu: float = 0.0,
    runs: int | None = None,
) -> ThreadSample:
    """A thread as the watch loop reads it from /proc: asleep (S) in futex(2) by default,
    `nr` its syscall number (or a word: "running"), `args` its arguments."""
    return ThreadSample(
        tid=tid,
        name=f"t{tid}",
        state=state,
        wchan="futex_do_wait" if state == "S" else "",
        syscall=str(nr),
        cpu_time=cpu,
        syscall_args=list(args) if str(nr).isdigit() else [],
        runs=runs,
    )
