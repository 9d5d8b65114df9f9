"""Views over a sample set for the detectors of process hangs: a thread's Python stack, the
call a thread waits in (its Python line when py-spy gave one), who waits for which child,
which thread blocks writing a pipe and who reads it, private futex waits, and the
multiprocessing / concurrent.futures pools of the tree.

What a thread waits on comes from the quiescence rule's `ThreadWait`s (`on`, `peers`) when
the watch loop filled them, else from the /proc facts of the last snapshot (wchan, syscall
arguments), which say less (no pipe inode, no readers) but hold on every architecture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.analysis.views import processes, stacks_of, top
from harness.sampling.model import Frame, ProcessSample, SampleSet, ThreadSample, ThreadStack
from harness.sampling.waits import (
    CHILD_WAITS,
    FUTEX_PRIVATE_FLAG,
    POOL_WAITS,
    native_name,
)
from harness.vocab import EventKind

# the threads a process pool runs in its owner (Pool's handlers, the executor's manager)
_POOL_THREADS = re.compile(r"Pool\._handle_(workers|tasks|results)|_ExecutorManagerThread\.\w+")
# a pool worker's loop: multiprocessing.pool.worker, concurrent.futures.process._process_worker
_WORKER_LOOPS = {"worker": "pool.py", "_process_worker": "process.py"}
# what an idle worker calls from its loop: the task queue's get
_TASK_GETS = frozenset({"SimpleQueue.get", "Queue.get", "get"})


def base(path: str | None) -> str:
    return (path or "").rsplit("/", 1)[-1]


def python_stack(s: SampleSet, pid: int, tid: int) -> ThreadStack | None:
    return next((st for st in s.stacks if (st.pid, st.tid) == (pid, tid) and st.python), None)


def native_stack(s: SampleSet, pid: int, tid: int) -> ThreadStack | None:
    return next((st for st in s.stacks if (st.pid, st.tid) == (pid, tid) and not st.python), None)


def python_stacks(s: SampleSet, pid: int) -> list[ThreadStack]:
    return [st for st in stacks_of(s, pid) if st.python]


def is_api(f: Frame, apis: Mapping[str, str]) -> bool:
    """The frame is a call of `apis` (function → the file it is defined in)."""
    return apis.get(f.function) == base(f.file)


def has_frame(st: ThreadStack | None, apis: Mapping[str, str]) -> bool:
    return st is not None and any(is_api(f, apis) for f in st.frames)


def thread_sample(s: SampleSet, pid: int, tid: int) -> ThreadSample | None:
    proc = processes(s).get(pid)
    return next((th for th in proc.threads if th.tid == tid), None) if proc else None


def live_threads(proc: ProcessSample) -> list[ThreadSample]:
    return [th for th in proc.threads if th.state not in ("Z", "X")]


def api_site(frames: Sequence[Frame], apis: Mapping[str, str]) -> str | None:
    """ "Popen.wait (prog.py:12)": the outermost frame of `apis` on a Python stack, with the
    line of its caller (the program's line), or None."""
    found = [i for i, f in enumerate(frames) if is_api(f, apis)]
    if not found:
        return None
    i = found[-1]
    caller = frames[i + 1] if i + 1 < len(frames) else frames[i]
    where = f" ({base(caller.file)}:{caller.line})" if caller.file and caller.line else ""
    return f"{frames[i].function}{where}"


def wait_site(s: SampleSet, pid: int, tid: int, apis: Mapping[str, str] = CHILD_WAITS) -> str:
    """What the thread waits in, for people: the Python API and line when py-spy gave them
    ("Popen.wait (prog.py:12)"), else the native call and the Python line ("wait4 in main
    (prog.py:30)"), else the native call ("wait4")."""
    py = python_stack(s, pid, tid)
    site = api_site(py.frames, apis) if py else None
    if site:
        return site
    native = native_stack(s, pid, tid)
    call = native_name(native.frames[0].function) if native and native.frames else ""
    if py and py.frames:
        return f"{call} in {top(py.frames)}" if call else top(py.frames)
    th = thread_sample(s, pid, tid)
    return call or (th.wchan if th else "") or "?"


# ---------------------------------------------------------------- waits


def child_waiters(s: SampleSet) -> dict[int, list[tuple[int, int]]]:
    """child pid → the (pid, tid) of the threads waiting for it (wait4/waitid): from the
    ThreadWaits (`on` "child:N", else their words), else from the last snapshot (a thread in
    do_wait whose first argument is the pid, or any child when it is not positive)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for w in s.waits:
        for child in w.children:
            out.setdefault(child, []).append((w.pid, w.tid))
    if s.waits:
        return out
    procs = processes(s)
    for proc in procs.values():
        for th in live_threads(proc):
            if th.wchan != "do_wait" or not th.syscall_args:
                continue
            first = th.syscall_args[0] & 0xFFFFFFFF
            kids = (
                [first] if 0 < first < 1 << 31 else [p for p in procs if procs[p].ppid == proc.pid]
            )
            for child in kids:
                out.setdefault(child, []).append((proc.pid, th.tid))
    return out


@dataclass(frozen=True)
class PipeWrite:
    """A thread blocked writing a full pipe."""

    pid: int
    tid: int
    fd: int | None  # the fd it writes, from its syscall arguments
    pipe: str  # "pipe:[123]" when the watch loop resolved it, else ""
    readers: tuple[int, ...] | None  # the tree pids that hold the read end; None: not known

    def describe(self) -> str:
        fd = "" if self.fd is None else f"fd {self.fd}{' (stdout)' if self.fd == 1 else ''}"
        fd = f"{fd} (stderr)" if self.fd == 2 else fd
        if self.pipe:
            return f"{self.pipe}, {fd}" if fd else self.pipe
        return f"a pipe on {fd}" if fd else "a pipe"


def pipe_writes(s: SampleSet) -> list[PipeWrite]:
    """Every thread blocked writing a pipe at the end: the kernel's wait channel says so
    (anon_pipe_write, pipe_write); the ThreadWait, when the watch loop filled it, names the
    pipe and its readers."""
    by_thread = {(w.pid, w.tid): w for w in s.waits}
    out: list[PipeWrite] = []
    for proc in processes(s).values():
        for th in live_threads(proc):
            w = by_thread.get((proc.pid, th.tid))
            on_pipe = w is not None and w.on.startswith("pipe:") and "write" in w.what
            if "pipe_write" not in th.wchan and not on_pipe:
                continue
            fd = th.syscall_args[0] if th.syscall_args else None
            pipe = w.on if w is not None and w.on.startswith("pipe:") else ""
            readers = tuple(w.peers) if w is not None and pipe and w.peers else None
            out.append(PipeWrite(proc.pid, th.tid, fd, pipe, readers))
    return out


def private_futex_wait(th: ThreadSample) -> bool:
    """An untimed wait on a process-private futex: only a thread of the same process can
    end it (a threading.Lock, a Condition, a pthread mutex; not a multiprocessing SemLock,
    which is shared)."""
    args = th.syscall_args
    return (
        th.state == "S"
        and "futex" in th.wchan
        and len(args) >= 4
        and bool(args[1] & FUTEX_PRIVATE_FLAG)
        and args[3] == 0
    )


# ---------------------------------------------------------------- pools


@dataclass(frozen=True)
class PoolCaller:
    """A process that owns a process pool and waits for its results."""

    pid: int
    tid: int  # the waiting thread
    kind: str  # "multiprocessing.Pool" | "ProcessPoolExecutor"
    wait: str  # "Pool.map (prog.py:26)"


def pool_caller(s: SampleSet, pid: int) -> PoolCaller | None:
    """The pool of `pid` when it runs a process pool's threads (not a ThreadPool: its
    workers would be threads of its own) and a thread of it waits for the results."""
    stacks = python_stacks(s, pid)
    machinery = [
        f.function for st in stacks for f in st.frames if _POOL_THREADS.fullmatch(f.function)
    ]
    if not machinery or any(has_frame(st, _WORKER_LOOPS) for st in stacks):
        return None
    kind = "ProcessPoolExecutor" if "Executor" in machinery[0] else "multiprocessing.Pool"
    for st in stacks:
        if any(_POOL_THREADS.fullmatch(f.function) for f in st.frames):
            continue
        site = api_site(st.frames, POOL_WAITS)
        if site:
            return PoolCaller(pid, st.tid, kind, site)
    return None


@dataclass(frozen=True)
class Worker:
    """A live pool worker."""

    pid: int
    busy: bool  # in a task (or its Python stack is unknown), not idle at the task queue
    # started by Pool's worker handler to replace a worker that ended: a forked child's
    # main thread keeps the Python name of the thread that forked it
    replacement: bool


def pool_workers(s: SampleSet, owner: int) -> list[Worker]:
    """The live pool workers among the children of `owner`."""
    out: list[Worker] = []
    for proc in processes(s).values():
        if proc.ppid != owner or proc.status == "zombie":
            continue
        main = python_stack(s, proc.pid, proc.pid)
        if main is None:
            out.append(Worker(proc.pid, busy=True, replacement=False))
            continue
        loop = [i for i, f in enumerate(main.frames) if is_api(f, _WORKER_LOOPS)]
        if not loop:
            continue  # another child (a resource tracker, a helper)
        i = loop[0]
        idle = i > 0 and main.frames[i - 1].function in _TASK_GETS
        out.append(Worker(proc.pid, not idle, "(_handle_workers)" in main.name))
    return sorted(out, key=lambda w: w.pid)


def pool_worker_pids(s: SampleSet, owner: int) -> set[int]:
    """The pids seen as workers of `owner`'s process pool: its live workers (a worker loop
    on the main thread's stack), and its children that ended under the same process name
    as those workers (the owner's own name when none is left): a pool forks or spawns the
    owner's interpreter, while a child that exec'd another program (an earlier
    `subprocess.run(["make"])`) ends under that program's name. A child seen live in
    another role (a resource tracker, a helper) is none."""
    procs = processes(s)
    workers = {w.pid for w in pool_workers(s, owner)}
    names = {procs[p].name for p in workers if p in procs}
    if not names and owner in procs:
        names = {procs[owner].name}
    other = {
        p.pid
        for p in procs.values()
        if p.ppid == owner and p.pid not in workers and p.status != "zombie"
    }
    ended = {
        e.pid
        for e in s.events
        if e.event is EventKind.EXIT and e.ppid == owner and e.pid not in other and e.name in names
    }
    return workers | ended
