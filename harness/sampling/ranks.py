"""A process's place in a distributed job: its rank and the job's size, as its launcher
told it. torchrun and torch.distributed's launchers set RANK / LOCAL_RANK / WORLD_SIZE in
the environment (older scripts take `--rank N --world-size N` or `--local_rank=N` on the
command line); MPI launchers set PMI_RANK / PMI_SIZE (MPICH's Hydra), OMPI_COMM_WORLD_RANK /
OMPI_COMM_WORLD_SIZE (Open MPI) or PMIX_RANK. The environment is read from
/proc/PID/environ while the process lives (the sampler's job: `read_ranks`); the command
line is in every snapshot, so `rank_from_argv` works on a saved report too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

# a process's environment is read up to this much (a huge environment is not a rank's)
MAX_ENVIRON_BYTES = 256 * 1024


@dataclass
class ProcessRank:
    """A process's rank in a distributed job."""

    pid: int
    rank: int
    world_size: int | None  # None: not told
    local_rank: int | None
    launcher: str  # "torch" (RANK …) or "mpi" (PMI_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK)
    source: str  # where it was read: "environ RANK", "argv --rank"


class _Process(Protocol):
    """What `read_ranks` needs of a sampled process (model.ProcessSample has it)."""

    @property
    def pid(self) -> int: ...
    @property
    def cmdline(self) -> list[str]: ...


# (launcher, rank variable, size variable, local-rank variable), first found wins: an MPI
# rank that also sets RANK for torch (mpi4py + torch) is an MPI rank first
_ENV_SCHEMES = (
    ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("mpi", "PMIX_RANK", "", ""),
    ("torch", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
)
_ARGV_FLAG = re.compile(r"--(rank|world[-_]size|local[-_]rank|nprocs)(?:=(.*))?")


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rank_from_environ(pid: int, env: Mapping[str, str]) -> ProcessRank | None:
    """The rank an environment gives, if any."""
    for launcher, rank_var, size_var, local_var in _ENV_SCHEMES:
        rank = _int(env.get(rank_var))
        if rank is not None and rank >= 0:
            size = _int(env.get(size_var)) if size_var else None
            local = _int(env.get(local_var)) if local_var else None
            return ProcessRank(pid, rank, size, local, launcher, f"environ {rank_var}")
    return None


def rank_from_argv(pid: int, argv: Sequence[str]) -> ProcessRank | None:
    """The rank a command line gives (`--rank N`, `--rank=N`, `--world-size N`,
    `--local_rank=N` as torch.distributed.launch passed it), if any; only a Python
    process's arguments are read (a launcher's own `--nprocs 2` is not a rank)."""
    values: dict[str, int] = {}
    for i, arg in enumerate(argv[1:], 1):
        m = _ARGV_FLAG.fullmatch(arg)
        if m is None:
            continue
        text = m.group(2) if m.group(2) is not None else (argv[i + 1] if i + 1 < len(argv) else "")
        value = _int(text)
        if value is not None:
            values.setdefault(m.group(1).replace("-", "_"), value)
    rank = values.get("rank", values.get("local_rank"))
    if rank is None:
        return None
    flag = "--rank" if "rank" in values else "--local_rank"
    return ProcessRank(
        pid, rank, values.get("world_size"), values.get("local_rank"), "torch", f"argv {flag}"
    )


def read_environ(pid: int) -> dict[str, str]:
    """/proc/PID/environ as a dict; {} when unreadable (gone, another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(MAX_ENVIRON_BYTES)
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def read_rank(pid: int, argv: Sequence[str]) -> ProcessRank | None:
    """A live process's rank: its environment first, else its command line."""
    return rank_from_environ(pid, read_environ(pid)) or rank_from_argv(pid, argv)


def read_ranks(processes: Iterable[_Process]) -> list[ProcessRank]:
    """The ranks of the processes sampled (each read once, while it lives)."""
    return [r for p in processes if (r := read_rank(p.pid, p.cmdline)) is not None]
