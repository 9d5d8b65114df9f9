"""Sample sets built by hand for the tests of what reads them (classify, the detectors,
the wake graph's causes, the console): one builder with the empty defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.sampling.model import (
    ProcessEvent,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadStack,
    ThreadWait,
    WakeChain,
)
from harness.sampling.ranks import ProcessRank


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
