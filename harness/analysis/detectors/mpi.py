"""MPI ranks blocked in point-to-point calls that can only complete together
(`mpi-peers-blocked`): every rank in MPI_Send to another (an unsafe send/send exchange:
a message over the eager limit waits for its matching receive), every rank in MPI_Recv,
or sends and receives that do not pair up. MPICH and Open MPI busy-poll their progress
engine while they wait, so such ranks spin rather than sleep: `is_mpi_progress` tells the
other detectors (spin-on-blocked-workers) that this spinning is waiting, not work.

A rank is a process with PMI_RANK / OMPI_COMM_WORLD_RANK / PMIX_RANK in its environment
(sampling/ranks.py), or, when the environment was not read, a process whose stack is in an
MPI call (rank "?").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.detectors.torchdist import recorded_ranks
from harness.analysis.views import processes, top
from harness.config.causes import NoParams
from harness.sampling.model import Frame, SampleSet, spinning

# an MPI entry point (PMPI_Send_c is MPICH 4+'s large-count Send behind MPI_Send)
_MPI_CALL = re.compile(r"P?MPI_(?P<call>[A-Z]\w*?)(?:_c)?")
# mpi4py's Cython wrappers: __pyx_pw_6mpi4py_3MPI_4Comm_69Send → Comm.Send
_MPI4PY = re.compile(r"__pyx_pw_6mpi4py_3MPI_\d+(?P<cls>[A-Za-z]+)_\d+(?P<call>[A-Za-z]+)")
# the progress engines' internals (symbol names when the library has them)
_PROGRESS = re.compile(
    r"MPID[IR]?_\w+|MPIR_\w+|MPID_Progress\w*|MPIDI_\w+|opal_progress\w*|ompi_request_\w+"
    r"|mca_pml_\w+|ucp_worker_progress|uct_\w+"
)
# the canonical names sampling/runtimes.py gives an MPI library (Intel MPI and MVAPICH are
# MPICH derivatives: "mpich"; another MPI: "mpi")
_MPI_RUNTIMES = frozenset({"mpich", "openmpi", "mpi"})
_SENDS = frozenset({"Send", "Ssend", "Bsend", "Rsend"})
_RECVS = frozenset({"Recv", "Probe", "Mprobe"})


def is_mpi_progress(frames: Sequence[Frame], depth: int = 12) -> bool:
    """The stack is inside an MPI library call (its progress engine spins while it waits)."""
    for f in frames[:depth]:
        if _MPI_CALL.fullmatch(f.function) or _PROGRESS.fullmatch(f.function):
            return True
        if f.runtime in _MPI_RUNTIMES:
            return True
    return False


def mpi_call(frames: Sequence[Frame]) -> str:
    """The MPI call a stack is in ("Send", "Recv", "Sendrecv", "Wait" …), "" when none:
    the outermost MPI entry point (the one the program called)."""
    calls = [m["call"] for f in frames if (m := _MPI_CALL.fullmatch(f.function))]
    return calls[-1] if calls else ""


@dataclass(frozen=True)
class MpiRow:
    rank: str  # "0", or "?" when the environment was not read
    pid: int
    call: str
    line: str  # the program's own line (Python, else native)
    state: str  # "spinning at 40% of a core" / "blocked"


def mpi_table(s: SampleSet) -> list[MpiRow]:
    """One row per MPI rank whose main thread is in an MPI call, in rank (else pid) order."""
    ranks = {r.pid: r for r in recorded_ranks(s) if r.launcher == "mpi"}
    rows: list[MpiRow] = []
    for pid, p in sorted(processes(s).items()):
        native = next((st for st in s.stacks if st.tid == pid and not st.python), None)
        call = mpi_call(native.frames) if native is not None else ""
        if not call and pid not in ranks:
            continue
        py = next((st for st in s.stacks if st.tid == pid and st.python), None)
        line = top(py.frames) if py is not None else top(native.frames) if native else "?"
        act = next((a for a in s.activity if a.tid == pid), None)
        state = (
            f"spinning at {act.cpu_fraction * 100:.0f}% of a core"
            if act is not None and spinning(act.states, act.cpu_fraction)
            else "blocked"
        )
        rank = str(ranks[pid].rank) if pid in ranks else "?"
        rows.append(MpiRow(rank, p.pid, call, line, state))
    return sorted(rows, key=lambda r: (r.rank == "?", int(r.rank) if r.rank != "?" else r.pid))


def _shape(calls: set[str]) -> str:
    if calls <= _SENDS:
        return (
            "every rank is in a blocking send and none receives: an unsafe send/send exchange "
            "(a message over the eager limit waits for a receive that is never posted)"
        )
    if calls <= _RECVS:
        return "every rank is in a blocking receive and none sends"
    return "their sends and receives do not pair up (check peers and tags)"


@detector("mpi-peers-blocked", fields=("ranks", "calls", "shape", "table"))
def mpi_peers_blocked(seen: Inputs, params: NoParams) -> list[Match]:
    """Two or more MPI ranks, all in blocking point-to-point calls (send or receive), and
    no rank of the job outside MPI: they wait for each other."""
    rows = mpi_table(seen.samples)
    p2p = [r for r in rows if r.call in _SENDS | _RECVS]
    if len(p2p) < 2 or len(p2p) != len(rows):
        return []
    lines = ["rank | pid | MPI call | line | state"]
    lines += [f"{r.rank} | {r.pid} | MPI_{r.call} | {r.line} | {r.state}" for r in rows]
    calls = sorted({r.call for r in p2p})
    return [
        match(
            lines,
            ranks=", ".join(
                f"rank {r.rank} (pid {r.pid}) in MPI_{r.call} at {r.line}" for r in rows
            ),
            calls="/".join(f"MPI_{c}" for c in calls),
            shape=_shape(set(calls)),
            table="; ".join(lines),
        )
    ]
