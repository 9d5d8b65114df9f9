"""The distributed-job detectors on real jobs: torch.distributed (gloo, CPU) ranks in
different collectives (`collective-mismatch`), a rank stuck outside the collective the
other waits in (`missing-rank`), the gloo timeout lines (`collective-timeout`), an MPI
send/send exchange (`mpi-peers-blocked`, and no `spin-on-blocked-workers` for ranks that
spin in MPICH's progress engine); and their healthy look-alikes (gloo ranks in the same
collectives with long compute between them, an MPI Sendrecv exchange), under the harness
and sampled live mid-run, where nothing may be found. Ranks are read from each process's
environment (RANK / WORLD_SIZE, PMI_RANK) by sampling/ranks.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.causes import Cause
from harness.analysis.classify import Verdict
from harness.analysis.detectors import DETECTORS, Match, run
from harness.analysis.detectors.mpi import is_mpi_progress, mpi_call
from harness.analysis.detectors.torchdist import timeouts
from harness.config.causes import NoParams
from harness.outcome import Kind
from harness.sampling.model import (
    Frame,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadSample,
    ThreadStack,
)
from harness.sampling.ranks import ProcessRank, rank_from_argv, rank_from_environ, read_rank
from harness.sampling.sample import sample_tree
from harness.vocab import StackToolName
from tests import facts
from tests.harness_cli import ROOT, verdict_of, watch_cmd, watch_opts
from tests.samples import sample_set

PROGRAMS = ROOT / "tests" / "programs"
needs_py_spy = pytest.mark.needs_tool("py-spy", why="Python stacks name each rank's call")
pytestmark = [pytest.mark.timeout(240), pytest.mark.spread]
DIST_DETECTORS = ("collective-mismatch", "missing-rank", "mpi-peers-blocked")


def watch(
    tmp_path: Path, *cmd: str, opts: tuple[str, ...], env: dict[str, str] | None = None
) -> Verdict:
    """The verdict of `harness watch OPTS -- CMD`, read back typed."""
    return verdict_of(watch_cmd(tmp_path / "reports", *cmd, opts=opts, env=env).loaded)


def causes(v: Verdict) -> dict[str, Cause]:
    return {c.id: c for c in v.causes}


# torch's import takes seconds on a loaded 2-core machine: a generous startup window
TORCH = watch_opts(startup=60, stall=6, quiescent=3, timeout=150)
MPI = watch_opts(startup=6, stall=4, quiescent=2, timeout=60)


def mpiexec() -> str:
    """mpiexec on PATH, else the one the `mpich` wheel puts in the venv's bin (beside this
    Python: tests run as .venv/bin/python without the venv on PATH); else missing."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = shutil.which("mpiexec") or (str(beside) if beside.exists() else None)
    if found is None:
        facts.missing("mpiexec (not on PATH, nor beside python)", "MPI ranks")
    return found


def need_torch() -> None:
    facts.require_module("torch", why="torch.distributed ranks (gloo, CPU)")


def need_mpi4py() -> None:
    facts.require_module("mpi4py", why="MPI ranks in Python (pip install mpich mpi4py)")


# ---------------------------------------------------------------- ranks


def exec_done(pid: int) -> int:
    """`pid` once it has exec'd sleep (before that /proc shows the forking parent's
    environment)."""
    for _ in range(200):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().startswith(b"sleep"):
                return pid
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never exec'd sleep")


def test_rank_of_a_live_process_from_its_environment(spawn: Callable[..., Any]) -> None:
    env = {**os.environ, "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}
    proc = spawn(["sleep", "30"], env=env)
    exec_done(proc.pid)
    assert read_rank(proc.pid, ["sleep", "30"]) == ProcessRank(
        proc.pid, 3, 4, 1, "torch", "environ RANK"
    )
    # an MPI rank that also sets RANK for torch is an MPI rank (mpi4py + torch)
    mpi_env = {**env, "PMI_RANK": "5", "PMI_SIZE": "8"}
    mpi = spawn(["sleep", "30"], env=mpi_env)
    exec_done(mpi.pid)
    assert read_rank(mpi.pid, ["sleep"]) == ProcessRank(
        mpi.pid, 5, 8, None, "mpi", "environ PMI_RANK"
    )
    # a process of no job; a gone one reads as no environment, never raises
    plain = spawn(["sleep", "30"], env={k: v for k, v in os.environ.items() if "RANK" not in k})
    exec_done(plain.pid)
    assert read_rank(plain.pid, ["sleep"]) is None
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert read_rank(gone.pid, ["true"]) is None


def test_rank_from_the_command_line() -> None:
    argv = ["python", "train.py", "--rank", "1", "--world-size=2"]
    assert rank_from_argv(7, argv) == ProcessRank(7, 1, 2, None, "torch", "argv --rank")
    legacy = ["python", "train.py", "--local_rank=0"]  # torch.distributed.launch's
    assert rank_from_argv(7, legacy) == ProcessRank(7, 0, None, 0, "torch", "argv --local_rank")
    assert rank_from_argv(7, ["torchrun", "--nprocs", "2", "train.py"]) is None
    assert rank_from_argv(7, ["python", "--rank", "x"]) is None
    assert rank_from_environ(7, {"RANK": "-1"}) is None  # torch's "not distributed"


# ---------------------------------------------------------------- timeout lines

# the two ranks of tests/programs/dist_mismatch.py with DIST_TIMEOUT_S=5, as they printed
# them (torch 2.13.0 CPU, gloo), tracebacks cut to the frames the parser reads
GLOO_TAIL = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/work/main/tests/programs/dist_mismatch.py", line 55, in rank_main',
    "[rank0]:     dist.all_reduce(metrics)  # rank 0 reduces ...",
    '[rank0]:   File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/'
    'distributed_c10d.py", line 3252, in all_reduce',
    "[rank0]:     work.wait()",
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete",
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/'
    'distributed_c10d.py", line 3151, in broadcast',
    "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete",
]
# NCCL's watchdog, as NVIDIA/nccl#1409 reports it (ranks 7 and 3 of a job, the same
# SeqNum, different OpType: a mismatch), and as Megatron-LM#1207 (one collective)
NCCL_MISMATCH = [
    "[rank7]:[E816 01:45:40.183009389 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, "
    "NumelOut=5056, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
    "[rank3]:[E816 01:45:40.212150935 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=80078, OpType=ALLREDUCE, NumelIn=2106881, "
    "NumelOut=2106881, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.",
]
NCCL_SAME = [
    "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600013 milliseconds before timing out."
]


def timeout_match(tail: list[str]) -> Match:
    [m] = run(DETECTORS["collective-timeout"], NoParams(), None, tail)
    return m


def test_gloo_timeout_lines_name_each_ranks_collective() -> None:
    assert [(t.rank, t.op, t.seq) for t in timeouts(GLOO_TAIL)] == [
        (0, "all_reduce", ""),
        (1, "broadcast", ""),
    ]
    m = timeout_match(GLOO_TAIL)
    assert m.fields == {
        "ranks": "rank 0 in all_reduce, rank 1 in broadcast",
        "finding": "ranks in different collectives: all_reduce vs broadcast",
    }
    assert len(m.evidence) == 2 and "Timed out waiting 5000ms" in m.evidence[0]


def test_nccl_watchdog_lines() -> None:
    m = timeout_match(NCCL_MISMATCH)
    assert m.fields["ranks"] == "rank 3 in ALLREDUCE #80078, rank 7 in BROADCAST #80078"
    assert m.fields["finding"] == "ranks in different collectives: ALLREDUCE vs BROADCAST"
    same = timeout_match(NCCL_SAME).fields["finding"]
    assert same.startswith("every rank that reported waits in the same ALLREDUCE (SeqNum 5)")
    assert run(DETECTORS["collective-timeout"], NoParams(), None, ["step 5", "loss 0.1"]) == []


# ---------------------------------------------------------------- MPI frames


def test_mpi_calls_and_progress_frames() -> None:
    send = [Frame("__sched_yield"), Frame("??", runtime="mpich"), Frame("PMPI_Send_c")]
    assert mpi_call(send) == "Send" and is_mpi_progress(send)
    ompi = [Frame("opal_progress"), Frame("ompi_request_default_wait"), Frame("PMPI_Recv")]
    assert mpi_call(ompi) == "Recv" and is_mpi_progress(ompi)
    spin = [Frame("spin_forever"), Frame("main")]
    assert mpi_call(spin) == "" and not is_mpi_progress(spin)


# ---------------------------------------------------------------- torch.distributed jobs


def ranks_of(samples: SampleSet) -> list[int]:
    return sorted(r.rank for r in getattr(samples, "ranks", []))


@pytest.mark.slow
@needs_py_spy
def test_ranks_in_different_collectives(tmp_path: Path) -> None:
    need_torch()
    v = watch(tmp_path, sys.executable, str(PROGRAMS / "dist_mismatch.py"), opts=TORCH)
    assert v.kind is Kind.HANG
    found = causes(v)
    assert "collective-mismatch" in found and "missing-rank" not in found, found
    cause = found["collective-mismatch"]
    assert "different collectives: all_reduce vs broadcast" in cause.sentence
    assert "rank 0 (pid" in cause.sentence and "rank 1 (pid" in cause.sentence
    table = cause.evidence
    assert table[0] == "rank | pid | collective | Python line"
    assert table[1].startswith("0 | ") and table[1].endswith(
        "| all_reduce | rank_main (dist_mismatch.py:55)"
    )
    assert table[2].startswith("1 | ") and table[2].endswith(
        "| broadcast | rank_main (dist_mismatch.py:57)"
    )


@pytest.mark.slow
@needs_py_spy
def test_a_rank_outside_the_collective(tmp_path: Path) -> None:
    need_torch()
    v = watch(tmp_path, sys.executable, str(PROGRAMS / "dist_missing.py"), opts=TORCH)
    assert v.kind is Kind.HANG
    found = causes(v)
    assert "missing-rank" in found and "collective-mismatch" not in found, found
    sentence = found["missing-rank"].sentence
    assert (
        "rank 1 (pid" in sentence and "is in no collective: rank_main (dist_missing.py:" in sentence
    )
    assert "waiting: rank 0 (pid" in sentence and "in all_reduce at rank_main" in sentence


@pytest.mark.slow
def test_gloo_timeout_under_the_harness(tmp_path: Path) -> None:
    """With a 3 s process-group timeout both ranks fail with gloo's timeout line: an
    error exit whose cause names both ranks' collectives."""
    need_torch()
    env = {"DIST_TIMEOUT_S": "3"}
    v = watch(tmp_path, sys.executable, str(PROGRAMS / "dist_mismatch.py"), opts=TORCH, env=env)
    assert v.kind is Kind.ERROR_EXIT, v
    found = causes(v)
    assert "collective-timeout" in found, found
    sentence = found["collective-timeout"].sentence
    # which ranks print gloo's timeout line depends on timing: the first rank to time out
    # exits, and its peer may then fail on the closed connection instead of its own timeout
    both = "ranks in different collectives: all_reduce vs broadcast"
    assert sentence == (
        f"torch.distributed collectives timed out: {both} (rank 0 in all_reduce, rank 1 in "
        "broadcast)"
    ) or re.fullmatch(
        r"torch\.distributed collectives timed out: every rank that reported waits in the same "
        r"(all_reduce|broadcast): a rank that reported no timeout either never joined it or "
        r"failed otherwise first \(rank [01] in (all_reduce|broadcast)\)",
        sentence,
    ), sentence


@pytest.mark.slow
def test_gloo_ranks_with_long_compute_pass(tmp_path: Path) -> None:
    need_torch()
    v = watch(tmp_path, sys.executable, str(PROGRAMS / "dist_healthy.py"), opts=TORCH)
    assert v.kind is Kind.PASS and v.causes == []


@pytest.mark.slow
@needs_py_spy
def test_gloo_ranks_sampled_mid_run_are_no_finding(spawn: Callable[..., Any]) -> None:
    """Sampled while rank 0 waits in all_reduce for rank 1, which computes: not missing."""
    need_torch()
    job = spawn([sys.executable, PROGRAMS / "dist_healthy.py"], env={**os.environ, "STEPS": "40"})
    job.expect("rank 1: step 1", timeout=90)
    # several windows: each catches the ranks at a different point of their step (CI once
    # caught rank 0 back in its compute after waiting most of the window in all_reduce)
    for _ in range(4):
        samples = sample_tree(job.pid, snapshots=3, interval=0.3)
        assert ranks_of(samples) == [0, 1], samples.notes
        for name in DIST_DETECTORS:
            assert run(DETECTORS[name], NoParams(), samples, []) == [], name


def two_ranks(states0: list[str], cpu0: float) -> SampleSet:
    """Rank 0 (pid 100) in its own compute, with the given states and CPU share over the
    window; rank 1 (pid 101) in all_reduce."""

    def proc(pid: int) -> ProcessSample:
        thread = ThreadSample(pid, "python", "S", "futex_do_wait", "202", 1.0)
        return ProcessSample(
            pid, 99, "python", "/usr/bin/python3", ["python3"], "sleeping", True, [thread]
        )

    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    stacks = [
        ThreadStack(
            100,
            100,
            "python",
            [Frame("compute", file="train.py", line=9, own=True)],
            StackToolName.PY_SPY,
            python=True,
        ),
        ThreadStack(
            101,
            101,
            "python",
            [
                Frame("all_reduce", file=c10d, line=2500),
                Frame("step", file="train.py", line=20, own=True),
            ],
            StackToolName.PY_SPY,
            python=True,
        ),
    ]
    activity = [
        ThreadActivity(100, 100, "python", states0, cpu0, "", "running"),
        ThreadActivity(101, 101, "python", ["S", "S", "S"], 0.0, "futex_do_wait", "202"),
    ]
    ranks = [
        ProcessRank(pid, pid - 100, 2, pid - 100, "torch", "environ RANK") for pid in (100, 101)
    ]
    snaps = [Snapshot(t, [proc(100), proc(101)]) for t in (0.0, 0.3, 0.6)]
    return sample_set(snaps, activity, stacks, duration_s=0.6, ranks=ranks)


@pytest.mark.parametrize(
    ("states", "cpu", "missing"),
    [
        (["S", "S", "R"], 0.2, False),  # waited most of the window, computing at the last look
        (["S", "S", "S"], 0.1, False),  # computed between looks (a tenth of a core)
        (["S", "S", "S"], 0.0, True),  # blocked outside the collective the whole window
    ],
)
def test_a_rank_back_in_its_compute_is_not_missing(
    states: list[str], cpu: float, missing: bool
) -> None:
    found = run(DETECTORS["missing-rank"], NoParams(), two_ranks(states, cpu), [])
    assert bool(found) is missing, found
    if missing:
        assert found[0].fields["missing"].startswith("rank 0 (pid 100) is in no collective")


# ---------------------------------------------------------------- MPI jobs


@pytest.mark.slow
@needs_py_spy
def test_mpi_send_send_exchange(tmp_path: Path) -> None:
    need_mpi4py()
    cmd = (mpiexec(), "-n", "2", sys.executable, str(PROGRAMS / "dist_mpi_sendsend.py"))
    v = watch(tmp_path, *cmd, opts=MPI)
    assert v.kind is Kind.HANG
    found = causes(v)
    # one cause for the exchange, none per spinning rank
    assert "mpi-peers-blocked" in found and "spin-on-blocked-workers" not in found, found
    cause = found["mpi-peers-blocked"]
    assert (
        "MPI ranks wait for each other in MPI_Send: every rank is in a blocking send"
        in cause.sentence
    )
    rows = cause.evidence[1:]
    assert [r.split(" | ")[0] for r in rows] == ["0", "1"], rows
    assert all(" | MPI_Send | <module> (dist_mpi_sendsend.py:24) | " in r for r in rows), rows


@pytest.mark.slow
def test_mpi_sendrecv_exchange_passes(tmp_path: Path) -> None:
    need_mpi4py()
    cmd = (mpiexec(), "-n", "2", sys.executable, str(PROGRAMS / "dist_mpi_sendrecv.py"))
    v = watch(tmp_path, *cmd, opts=MPI)
    assert v.kind is Kind.PASS and v.causes == []


@pytest.mark.slow
@needs_py_spy
def test_mpi_sendrecv_sampled_mid_run_is_no_finding(spawn: Callable[..., Any]) -> None:
    need_mpi4py()
    cmd = [mpiexec(), "-n", "2", sys.executable, PROGRAMS / "dist_mpi_sendrecv.py"]
    job = spawn(cmd, env={**os.environ, "ROUNDS": "200"})
    job.expect("round 5", timeout=30)
    samples = sample_tree(job.pid, snapshots=3, interval=0.3)
    assert ranks_of(samples) == [0, 1], samples.notes
    for name in (*DIST_DETECTORS, "spin-on-blocked-workers"):
        found = DETECTORS[name]
        assert run(found, found.params(), samples, []) == [], name
