"""The detectors of the cause rules: each looks at what a run left (stacks, the watch loop's
lineage and exit statuses, lock cycles, the output) and returns one `Match` per finding.

`registry` holds the contract (`@detector`, `Match`, `Inputs`; `vocab.Need`) and `DETECTORS`;
the detectors live by topic: `process` (the process tree), `threads` (threads waiting on
each other), `patterns` (a rule's own regexes), `pyprocs` (processes of a Python tree: pipes,
queues, pools, fork with threads, over `pystacks`), `distributed` (`torchdist`: ranks of
torch.distributed; `mpi`: MPI peers), `wake` (the wake graph's chain, whose readings are data).
A new detector is a function with
`@detector(...)` in one of them (a new topic module is imported below).
"""

from __future__ import annotations

from harness.analysis.detectors import (
    distributed,
    patterns,
    process,
    pyprocs,
    threads,
    wake,
)
from harness.analysis.detectors.registry import DETECTORS, Detector, Inputs, Match, run

__all__ = [
    "DETECTORS",
    "Detector",
    "Inputs",
    "Match",
    "distributed",
    "patterns",
    "process",
    "pyprocs",
    "run",
    "threads",
    "wake",
]
