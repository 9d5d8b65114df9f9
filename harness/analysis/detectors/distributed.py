"""The detectors over the ranks of a distributed job, by launcher: `torchdist`
(torch.distributed: collective-mismatch, missing-rank, collective-timeout) and `mpi`
(mpi-peers-blocked). Importing this module registers them."""

from __future__ import annotations

from harness.analysis.detectors import mpi, torchdist

__all__ = ["mpi", "torchdist"]
