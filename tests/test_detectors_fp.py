"""False positives of the detectors and of the analysis (review of issue 18: 2.2, 2.4-2.10),
each as the shape that fooled it, beside the true finding it must still make. Hand-made
sample sets where a real run would take long (a pool caller beside a failed child, ranks in
one collective from two lines, a spawn child under an OpenMP parent); real files where the
hazard is the file (a FIFO as a frame's source, /proc/PID/maps)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.analysis import classify, waitchain
from harness.analysis.detectors import DETECTORS, Match, mpi, run
from harness.config.causes import NoParams
from harness.config.signatures import load_signatures
from harness.sampling import pysource, runtimes
from harness.sampling.model import (
    Frame,
    ProcessEvent,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadActivity,
    ThreadSample,
    ThreadStack,
)
from harness.sampling.waits import ThreadWait
from harness.vocab import EventKind, Mechanism, StackToolName, WaitKind
from tests.samples import sample_set

PY = StackToolName.PY_SPY
NATIVE = StackToolName.EU_STACK
SIGS = load_signatures()
LIB = "/usr/lib/python3.11"
PROG = "/work/prog.py"
PYTHON = "/usr/bin/python3.11"


def _proc(
    pid: int,
    ppid: int,
    tids: Sequence[int] = (),
    *,
    name: str = "python",
    cmdline: Sequence[str] = ("python", "prog.py"),
    wchan: str = "futex_do_wait",
    args: Sequence[int] = (),
) -> ProcessSample:
    threads_ = [
        ThreadSample(t, name, "S", wchan if t == pid else "futex_do_wait", "202", 0.1, list(args))
        for t in (tids or [pid])
    ]
    return ProcessSample(pid, ppid, name, PYTHON, list(cmdline), "sleeping", True, threads_)


def _set(
    procs: Sequence[ProcessSample],
    stacks: Sequence[ThreadStack],
    events: Sequence[ProcessEvent] = (),
    waits: Sequence[ThreadWait] = (),
) -> SampleSet:
    """A tree at rest: every thread of `procs` asleep, no CPU, at every look."""
    activity = [
        ThreadActivity(p.pid, t.tid, t.name, ["S"] * 3, 0.0, t.wchan, t.syscall)
        for p in procs
        for t in p.threads
    ]
    snaps = [Snapshot(5.0, list(procs))]
    return sample_set(snaps, activity, stacks, duration_s=1.0, events=events, waits=waits)


def _find(name: str, s: SampleSet, tail: Sequence[str] = ()) -> list[Match]:
    return run(DETECTORS[name], NoParams(), s, tail)


def _exit(pid: int, ppid: int, name: str, **how: int | None) -> ProcessEvent:
    e = ProcessEvent(2.0, EventKind.EXIT, pid, ppid, name)
    e.exit_code, e.signal = how.get("exit_code"), how.get("signal")
    e.status_known = e.exit_code is not None or e.signal is not None
    e.status = "exited, status unknown" if not e.status_known else "ended"
    return e


# ---------------------------------------------------------------- 2.2 idle vs deadlock

LOCKED = [
    Frame("__lll_lock_wait", "libc.so.6"),
    Frame("pthread_mutex_lock", "libc.so.6"),
    Frame("transfer", "/work/bank", "bank.c", 20, own=True),
]


def _timed_deadlock(idle: bool) -> SampleSet:
    """Two threads in untimed mutex waits of a process that catches SIGALRM: quiescence
    calls them TIMED (a timer may end them), not idle."""
    what = "futex wait, no timeout (FUTEX_WAIT), but the process catches SIGALRM"
    s = _set(
        [_proc(10, 1, (10, 11), name="bank")],
        [ThreadStack(10, t, "bank", LOCKED, NATIVE) for t in (10, 11)],
        waits=[ThreadWait(10, t, WaitKind.TIMED, what, idle=idle) for t in (10, 11)],
    )
    return s


def test_a_deadlock_in_a_process_with_a_timer_is_no_idle_hang() -> None:
    v = classify.classify_hang(_timed_deadlock(idle=False), "no output for 60 s", SIGS)
    assert v.mechanism is Mechanism.DEADLOCK, v.evidence
    assert v.location == "transfer"


def test_threads_asleep_on_their_own_timers_are_idle() -> None:
    v = classify.classify_hang(_timed_deadlock(idle=True), "no output for 60 s", SIGS)
    assert v.mechanism is Mechanism.IDLE, v.evidence


# ---------------------------------------------------------------- 2.4 pool-lost-worker

POOL_CALLER = [
    Frame("Condition.wait", file=f"{LIB}/threading.py", line=320),
    Frame("ApplyResult.wait", file=f"{LIB}/multiprocessing/pool.py", line=765),
    Frame("ApplyResult.get", file=f"{LIB}/multiprocessing/pool.py", line=768),
    Frame("Pool.map", file=f"{LIB}/multiprocessing/pool.py", line=367),
    Frame("main", file=PROG, line=26, own=True),
]
POOL_HANDLER = [
    Frame("Pool._handle_workers", file=f"{LIB}/multiprocessing/pool.py", line=522),
    Frame("Thread.run", file=f"{LIB}/threading.py", line=975),
]
BUSY_WORKER = [
    Frame("task", file=PROG, line=17, own=True),
    Frame("worker", file=f"{LIB}/multiprocessing/pool.py", line=125),
    Frame("BaseProcess.run", file=f"{LIB}/multiprocessing/process.py", line=108),
]


def _pool(ended: ProcessEvent) -> SampleSet:
    """pid 100 in Pool.map; its workers 101 and 102 busy in a slow task; `ended` another
    child of pid 100 that is gone."""
    return _set(
        [_proc(100, 1, (100, 103)), _proc(101, 100), _proc(102, 100)],
        [
            ThreadStack(100, 100, "MainThread", POOL_CALLER, PY, python=True),
            ThreadStack(100, 103, "Thread-1", POOL_HANDLER, PY, python=True),
            *(ThreadStack(p, p, "MainThread", BUSY_WORKER, PY, python=True) for p in (101, 102)),
        ],
        events=[ended],
    )


def test_a_failed_child_that_was_no_pool_worker_is_no_lost_worker() -> None:
    """An earlier `subprocess.run(["sh", "-c", "exit 3"])` of the pool's caller, whose
    status the watch loop saw, while the pool's workers are busy: nothing was lost."""
    assert _find("pool-lost-worker", _pool(_exit(99, 100, "sh", exit_code=3))) == []


def test_a_killed_pool_worker_is_still_a_lost_worker() -> None:
    [m] = _find("pool-lost-worker", _pool(_exit(99, 100, "python", signal=9)))
    assert m.fields["lost"].startswith("pid 99 died by SIGKILL"), m.fields


# ---------------------------------------------------------------- 2.5 the wait-for chain

FUTURE_WAIT = [
    Frame("Condition.wait", file=f"{LIB}/threading.py", line=320),
    Frame("Future.result", file=f"{LIB}/concurrent/futures/_base.py", line=451),
    Frame("main", file=PROG, line=12, own=True),
]
IDLE_THREAD = [
    Frame("SimpleQueue.get", file=f"{LIB}/queue.py", line=171),
    Frame("_worker", file=f"{LIB}/concurrent/futures/thread.py", line=81),
]


def _result_wait(ended: ProcessEvent) -> SampleSet:
    return _set(
        [_proc(100, 1, (100, 102))],
        [
            ThreadStack(100, 100, "MainThread", FUTURE_WAIT, PY, python=True),
            ThreadStack(100, 102, "ThreadPoolExecutor-0_0", IDLE_THREAD, PY, python=True),
        ],
        events=[ended],
    )


def test_a_child_reaped_normally_is_no_death_in_the_chain() -> None:
    """A child that ended unseen (an earlier subprocess.run, reaped by its caller) is no
    death: the chain ends at the live thread, not at a 'dead' child."""
    chain = waitchain.follow(_result_wait(_exit(105, 100, "true")))
    assert chain is not None and chain.dead is None, chain
    assert chain.end == (100, 102)


def test_a_child_killed_by_a_signal_still_ends_the_chain() -> None:
    chain = waitchain.follow(_result_wait(_exit(105, 100, "python", signal=9)))
    assert chain is not None and chain.dead is not None and chain.dead.pid == 105, chain


def test_a_pool_worker_reaped_unseen_still_ends_the_chain() -> None:
    """multiprocessing.Pool reaps its SIGKILLed worker itself: status unknown, but a worker
    of the pool (its name is the workers'), so the chain ends at it."""
    s = _pool(_exit(99, 100, "python"))
    for st in s.stacks:  # the workers idle: no live thread runs the program's code
        if st.pid in (101, 102):
            st.frames = [Frame("SimpleQueue.get", file=f"{LIB}/multiprocessing/queues.py")]
            st.frames += BUSY_WORKER[1:]
    chain = waitchain.follow(s)
    assert chain is not None and chain.dead is not None and chain.dead.pid == 99, chain


# ---------------------------------------------------------------- 2.7 collective-mismatch

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _ranks(calls: dict[int, tuple[str, int]]) -> SampleSet:
    """One process per rank (`--rank N` on its command line), each in the c10d call and at
    the line of `calls`."""
    procs, stacks = [], []
    for rank, (call, line) in calls.items():
        pid = 200 + rank
        cmd = ("python", "train.py", "--rank", str(rank), "--world-size", str(len(calls)))
        procs.append(_proc(pid, 1, cmdline=cmd))
        frames = [Frame(call, file=C10D, line=2500), Frame("step", file=PROG, line=line, own=True)]
        stacks.append(ThreadStack(pid, pid, "MainThread", frames, PY, python=True))
    return _set(procs, stacks)


def test_one_collective_called_from_two_lines_is_no_mismatch() -> None:
    """`if rank == 0: all_reduce(a) else: all_reduce(b)`: one collective, legitimately."""
    s = _ranks({0: ("all_reduce", 30), 1: ("all_reduce", 32)})
    assert _find("collective-mismatch", s) == []


def test_different_collectives_are_a_mismatch() -> None:
    [m] = _find("collective-mismatch", _ranks({0: ("all_reduce", 30), 1: ("broadcast", 32)}))
    assert m.fields["collectives"] == "different collectives: all_reduce vs broadcast"


def test_one_collective_at_different_sequence_numbers_is_a_mismatch() -> None:
    tail = [
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=ALLREDUCE, NumelIn=1)",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, "
        "OpType=ALLREDUCE, NumelIn=1)",
    ]
    s = _ranks({0: ("all_reduce", 30), 1: ("all_reduce", 32)})
    [m] = _find("collective-mismatch", s, tail)
    assert m.fields["collectives"] == "all_reduce at different sequence numbers: 7, 8"


# ---------------------------------------------------------------- 2.8 pipe-never-read

POPEN_WAIT = [
    Frame("Popen._try_wait", file=f"{LIB}/subprocess.py", line=2004),
    Frame("Popen.wait", file=f"{LIB}/subprocess.py", line=1264),
    Frame("main", file=PROG, line=9, own=True),
]


def _pipeline(sibling: bool) -> SampleSet:
    """pid 100 in p1.wait() (wait4 on 101, read from the snapshot: no watch loop); p1 (pid
    101) blocks writing its stdout; with `sibling`, p2 (pid 102, `Popen(stdin=p1.stdout)`)
    is alive and may hold the read end."""
    procs = [
        _proc(100, 1, wchan="do_wait", args=[101, 0, 0, 0, 0, 0]),
        _proc(101, 100, name="yes", cmdline=["yes"], wchan="pipe_write", args=[1, 0, 4096]),
    ]
    if sibling:
        procs.append(_proc(102, 100, name="head", cmdline=["head", "-c", "1"], wchan="pipe_read"))
    return _set(procs, [ThreadStack(100, 100, "MainThread", POPEN_WAIT, PY, python=True)])


def test_a_pipe_whose_readers_are_unknown_is_not_blamed_on_the_parent_beside_a_sibling() -> None:
    assert _find("pipe-never-read", _pipeline(sibling=True)) == []


def test_a_pipe_whose_readers_are_unknown_is_blamed_on_the_only_candidate() -> None:
    [m] = _find("pipe-never-read", _pipeline(sibling=False))
    assert m.fields["parent"] == "100" and m.fields["child"] == "101"
    assert any("readers were not resolved" in line for line in m.evidence), m.evidence


# ---------------------------------------------------------------- 2.9 openmp-after-fork

GOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
IN_GOMP = [
    Frame("futex_wait", GOMP),
    Frame("gomp_team_barrier_wait_end", GOMP),
    Frame("GOMP_parallel", GOMP),
    Frame("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0"),
]
SPAWN = [
    PYTHON,
    "-c",
    "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
    "--multiprocessing-fork",
]


def _omp_child(cmdline: Sequence[str]) -> SampleSet:
    """pid 300 ran an OpenMP team (thread 301 in libgomp); its child pid 310, running the
    same python with `cmdline`, waits in libgomp."""
    parent_cmd = [PYTHON, "prog.py"]
    return _set(
        [_proc(300, 1, (300, 301), cmdline=parent_cmd), _proc(310, 300, cmdline=cmdline)],
        [
            ThreadStack(300, 301, "python", IN_GOMP, NATIVE),
            ThreadStack(310, 310, "python", IN_GOMP, NATIVE),
        ],
    )


@pytest.mark.parametrize(
    "cmdline", [SPAWN, [PYTHON, "-c", "from multiprocessing.forkserver import main; main(5)"]]
)
def test_a_spawn_or_forkserver_child_is_no_openmp_after_fork(cmdline: list[str]) -> None:
    assert _find("openmp-after-fork", _omp_child(cmdline)) == []


def test_a_forked_child_in_openmp_is_still_found() -> None:
    [m] = _find("openmp-after-fork", _omp_child([PYTHON, "prog.py"]))
    assert m.fields["child"] == "310" and m.fields["parent"] == "300"


# ---------------------------------------------------------------- 2.10 small ones


@pytest.mark.parametrize("runtime", ["mpich", "openmpi", "mpi"])
def test_mpi_frames_are_known_by_the_runtime_names_the_sampler_gives(runtime: str) -> None:
    """sampling/runtimes.py names an MPI library "mpich", "openmpi" or "mpi": a frame with
    no MPI_ symbol (a stripped progress engine) is still in MPI."""
    assert mpi.is_mpi_progress([Frame("0x7f00dead", "/opt/lib/libmpi.so.12", runtime=runtime)])
    assert not mpi.is_mpi_progress([Frame("0x7f00dead", "/opt/lib/libfoo.so", runtime="")])


def _locks_over(path: str) -> SampleSet:
    """Two Python threads in CPython's lock acquire at an own frame whose file is `path`."""
    native = [Frame("PyThread_acquire_lock_timed", "libpython3.11.so.1.0")]
    stacks = []
    for tid in (10, 11):
        own = [Frame("transfer", file=path, line=3, own=True)]
        stacks += [
            ThreadStack(10, tid, f"t{tid}", own, PY, python=True),
            ThreadStack(10, tid, f"t{tid}", native, NATIVE),
        ]
    return _set([_proc(10, 1, (10, 11))], stacks)


@pytest.mark.timeout(20)
def test_a_frame_file_that_is_a_fifo_is_not_opened(tmp_path: Path) -> None:
    """A frame's file can be anything by the time it is read (/dev/fd/63, a FIFO): opening
    a FIFO with no writer blocks forever. The lock sites are read from regular files only."""
    fifo = tmp_path / "prog.py"
    os.mkfifo(fifo)
    found: list[list[Match]] = []
    reader = threading.Thread(
        target=lambda: found.append(_find("python-locks", _locks_over(str(fifo))))
    )
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the reader before failing: open the FIFO's write end
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5)
        pytest.fail("python-locks blocked opening a FIFO named by a frame")
    [[m]] = found
    assert "`" not in m.fields["locks"]  # no statement read from it
    assert pysource.source_line(str(fifo), 1) == ""


def test_source_lines_come_from_regular_files_within_a_size_cap(tmp_path: Path) -> None:
    small = tmp_path / "small.py"
    small.write_text("import threading\nlock = threading.Lock()\nwith lock:  # take it\n")
    assert pysource.source_line(str(small), 3) == "with lock:  # take it"
    assert pysource.source_line(str(small), 9) == ""
    big = tmp_path / "big.py"
    big.write_bytes(b"with lock:\n" + b"#" * (1 << 20))
    assert pysource.source_line(str(big), 1) == ""
    link = tmp_path / "dev.py"
    link.symlink_to("/dev/zero")  # a character device behind a .py name
    assert pysource.source_line(str(link), 1) == ""


def test_maps_are_read_whole_lines_up_to_a_cap() -> None:
    full = Path(f"/proc/{os.getpid()}/maps").read_text()
    assert len(full) > 4096, "this process maps more than a page of lines"
    cut = runtimes.read_maps(os.getpid(), limit=4096)
    assert 0 < len(cut) <= 4096 and cut.endswith("\n")
    lines = cut.splitlines()
    assert lines and all(re.match(r"[0-9a-f]+-[0-9a-f]+ ", line) for line in lines), lines[-1]
    assert full.startswith(lines[0])
    assert runtimes.MAPS_LIMIT == 16 << 20
    whole = runtimes.read_maps(os.getpid())
    assert whole.splitlines()[0] == full.splitlines()[0] and len(whole) > len(cut)
