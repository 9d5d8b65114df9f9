"""The pthread mutex wait-for graph of a process (or a tree), read without debug symbols.

A thread blocked on a contended glibc mutex sleeps in the futex syscall on the mutex's
`__lock` word; /proc/PID/task/TID/syscall gives the word's address (arg0), the op (arg1)
and the value the thread expects there (arg2). glibc's struct __pthread_mutex_s starts,
on x86_64 (bits/struct_mutex.h of glibc 2.36 here) and aarch64 LP64 (glibc's
sysdeps/aarch64/nptl/bits/struct_mutex.h, pthread-offsets.h), with

    int __lock; unsigned int __count; int __owner; unsigned int __nusers; int __kind; ...

so `__owner`, the owner's TID, is the int at offset 8 and `__kind` the int at offset 16
(32-bit layouts differ, and their syscall numbers too: those processes are not read).
Which futex waits are mutex waits (as glibc 2.36 makes them):

- a normal (also recursive, errorcheck, adaptive) mutex: FUTEX_WAIT on `__lock` with the
  value 2 (locked, with waiters); the owner is `__owner`;
- a robust mutex: FUTEX_WAIT (always without FUTEX_PRIVATE_FLAG) with the value
  owner TID | FUTEX_WAITERS; the owner is the word's low 30 bits;
- a priority-inheritance mutex: FUTEX_LOCK_PI (or _PI2); the word holds owner TID |
  FUTEX_WAITERS, the owner is its low 30 bits. The kernel itself refuses the lock that
  would close a PI cycle (EDEADLK) and glibc then parks that thread for good in a plain
  wait on a word of its own stack: it is recognised (`pi_parked`) when it holds a
  contended PI mutex, and find_cycles closes the cycle through it.

Anything else (a condition variable: FUTEX_WAIT_BITSET on a `__g_signals` word with value 0;
a barrier; a semaphore; libgomp's barriers and locks; pthread_join on the joined thread's
TID) is "not a mutex". A candidate whose owner is not a thread of the process (of the tree,
for a process-shared mutex) or whose `__kind` is implausible is "unknown": not a mutex, or
its owner exited. CPython's locks are semaphores or bare futexes without an owner field:
in a Python process every futex wait that is not a pthread mutex has "owner unknown".

Memory is read with process_vm_readv (ctypes), falling back to /proc/PID/task/TID/mem;
both need ptrace rights over the process (as gdb does): without them the wait is
"unknown" with the reason. Addresses are per process: a cycle's mutex addresses are in
the address space of the thread that waits on them.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import platform
import struct
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psutil

from harness.sampling import procfs
from harness.sampling.model import ThreadSample, ThreadStack
from harness.sampling.waits import (
    FUTEX_LOCK_PI,
    FUTEX_LOCK_PI2,
    FUTEX_OWNER_DIED,
    FUTEX_TID_MASK,
    FUTEX_WAIT,
    FUTEX_WAIT_BITSET,
    FUTEX_WAIT_REQUEUE_PI,
    FUTEX_WAITERS,
    FUTEX_WAITS,
    FutexWait,
    futex_cmd,
)
from harness.vocab import FutexKind

FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}
OWNER_OFFSET = 8  # int __owner, after int __lock and unsigned __count
KIND_OFFSET = 16  # int __kind, after unsigned __nusers (LP64 layouts)
_MUTEX_BYTES = 20  # __lock .. __kind on both layouts


# __kind bits (glibc nptl/pthreadP.h): the type in the low bits, then the protocol flags
_KIND_TYPES = {0: "normal", 1: "recursive", 2: "errorcheck", 3: "adaptive"}
_KIND_ROBUST, _KIND_PI, _KIND_PP, _KIND_PSHARED = 16, 32, 64, 128
_KIND_ELISION_BITS = 256 | 512
_KIND_KNOWN = 3 | _KIND_ROBUST | _KIND_PI | _KIND_PP | _KIND_PSHARED | _KIND_ELISION_BITS


class CycleStep(NamedTuple):
    """A thread of a wait-for cycle and the mutex it waits for (held by the next step)."""

    tid: int
    name: str
    mutex: int | None  # address in the waiting thread's process; None: not known (pi_parked)


@dataclass
class LockGraph:
    waits: list[FutexWait]  # every futex waiter of the process (tree), by pid then tid
    cycles: list[list[CycleStep]]  # each starts at its smallest tid
    notes: list[str] = field(default_factory=list)  # what could not be read, one line each


class MemoryUnreadable(Exception):
    """Another process's memory could not be read; the message says why."""


# ---------------------------------------------------------------- reading memory


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _vm_readv() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    iov = ctypes.POINTER(_IoVec)
    fn.argtypes = [ctypes.c_int, iov, ctypes.c_ulong, iov, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_ssize_t
    return fn


_PROCESS_VM_READV = _vm_readv()


def _errno_text(code: int) -> str:
    return f"{errno.errorcode.get(code, str(code))} ({os.strerror(code)})"


def read_memory(pid: int, tid: int, address: int, size: int) -> bytes:
    """`size` bytes at `address` of process `pid`, read through its thread `tid` (which
    works while the main thread is a zombie). Raises MemoryUnreadable with the reason."""
    why = []
    if _PROCESS_VM_READV is not None:
        buf = ctypes.create_string_buffer(size)
        local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), size)
        remote = _IoVec(ctypes.c_void_p(address), size)
        got = _PROCESS_VM_READV(tid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got == size:
            return buf.raw
        code = ctypes.get_errno()
        why.append(f"process_vm_readv: {_errno_text(code) if got < 0 else f'{got} of {size}'}")
        if got < 0 and code == errno.ESRCH:
            raise MemoryUnreadable(f"thread {tid} of pid {pid} is gone")
    else:
        why.append("process_vm_readv: not in this libc")
    try:
        fd = os.open(f"/proc/{pid}/task/{tid}/mem", os.O_RDONLY)
        try:
            data = os.pread(fd, size, address)
        finally:
            os.close(fd)
        if len(data) == size:
            return data
        why.append(f"/proc/{pid}/task/{tid}/mem: {len(data)} of {size} bytes")
    except (OSError, OverflowError) as exc:
        err: int | None = getattr(exc, "errno", None)
        why.append(f"/proc/{pid}/task/{tid}/mem: {_errno_text(err) if err else exc}")
    denied = any("EPERM" in w or "EACCES" in w for w in why)
    hint = " (ptrace rights needed, as for gdb)" if denied else ""
    raise MemoryUnreadable("memory unreadable: " + "; ".join(why) + hint)


# ---------------------------------------------------------------- one thread's wait


def _classify(
    pid: int,
    th: ThreadSample,
    names: dict[int, str],
    owners: Collection[int],
    shared_owners: Collection[int],
) -> FutexWait:
    addr, op, value, timeout = th.syscall_args[:4]
    value &= 0xFFFFFFFF
    cmd = futex_cmd(op)

    def wait(what: FutexKind, owner: int | None, how: str) -> FutexWait:
        return FutexWait(pid, th.tid, th.name, addr, op, value, timeout != 0, what, owner, how)

    pi = cmd in (FUTEX_LOCK_PI, FUTEX_LOCK_PI2)
    robust = cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET) and bool(value & FUTEX_WAITERS)
    robust = robust and (value & FUTEX_TID_MASK) != 0
    normal = cmd in (FUTEX_WAIT, FUTEX_WAIT_BITSET) and value == 2
    if not (pi or robust or normal):
        return wait(FutexKind.NOT_A_MUTEX, None, _not_a_mutex(cmd, value, names))
    try:
        raw = read_memory(pid, th.tid, addr, _MUTEX_BYTES)
    except MemoryUnreadable as exc:
        return wait(FutexKind.UNKNOWN, None, str(exc))
    lock = struct.unpack_from("<I", raw, 0)[0]
    field_owner = struct.unpack_from("<i", raw, OWNER_OFFSET)[0]
    kind = struct.unpack_from("<i", raw, KIND_OFFSET)[0]
    plausible = kind >= 0 and not kind & ~_KIND_KNOWN
    pshared = plausible and bool(kind & _KIND_PSHARED)  # its owner may be in another process
    valid, where = (shared_owners, "the tree") if pshared else (owners, f"pid {pid}")
    if pi or robust:
        label, need = (
            (FutexKind.PI_MUTEX, _KIND_PI) if pi else (FutexKind.ROBUST_MUTEX, _KIND_ROBUST)
        )
        owner = lock & FUTEX_TID_MASK
        source = f"{FUTEX_WAITS.get(cmd, cmd)}: the futex word {lock:#x} holds the owner"
        if not plausible or not kind & need:
            return wait(FutexKind.UNKNOWN, None, f"{source}, but __kind {kind:#x} is not a {label}")
        if lock & FUTEX_OWNER_DIED:
            return wait(label, None, f"{source}: its owner died (FUTEX_OWNER_DIED)")
        if owner == 0:
            return wait(FutexKind.UNKNOWN, None, f"{source}, but names no thread: being released?")
        if owner not in valid:
            return wait(FutexKind.UNKNOWN, None, f"{source}: {owner} is not a thread of {where}")
        return wait(label, owner, source)
    if not plausible or kind & (_KIND_ROBUST | _KIND_PI | _KIND_PP):
        return wait(
            FutexKind.UNKNOWN, None, f"futex value 2, but __kind {kind:#x}: not a normal mutex"
        )
    if lock != 2:
        return wait(
            FutexKind.UNKNOWN, None, f"__lock is {lock} now, not 2: being released, or not a mutex"
        )
    kind_name = _KIND_TYPES[kind & 3]
    if field_owner in valid:
        how = f"__owner (offset {OWNER_OFFSET}) of a {kind_name} mutex; __lock 2"
        return wait(FutexKind.MUTEX, field_owner, how)
    if field_owner == 0:
        how = "__lock 2 but __owner 0: just taken, or not a mutex"
        return wait(FutexKind.UNKNOWN, None, how)
    how = f"__owner {field_owner} is not a thread of {where}: not a mutex, or its owner exited"
    return wait(FutexKind.UNKNOWN, None, how)


def _not_a_mutex(cmd: int, value: int, names: dict[int, str]) -> str:
    if cmd == FUTEX_WAIT_REQUEUE_PI:
        return "FUTEX_WAIT_REQUEUE_PI: a condition variable wait (PI mutex)"
    if cmd not in (FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI, FUTEX_LOCK_PI2):
        return f"futex op {cmd}: not a wait on a lock"
    if value in names:
        return f"futex value {value} = tid of {names[value]!r}: pthread_join"
    return (
        f"futex value {value}: not a mutex's lock word "
        "(condition variable, barrier, semaphore, OpenMP, ...)"
    )


def _python_note(wait: FutexWait, stacks: Sequence[ThreadStack]) -> FutexWait:
    how = "Python process: CPython locks have no owner field; owner unknown"
    for st in stacks:
        if st.tid == wait.tid and st.python and st.frames:
            top = st.frames[0]
            at = f" ({top.file}:{top.line})" if top.file and top.line else ""
            how += f"; waits in {top.function}{at}"
            break
    return dataclasses.replace(wait, what=FutexKind.UNKNOWN, owner=None, how=how)


def process_waits(
    pid: int,
    threads: Sequence[ThreadSample] | None = None,
    *,
    python: bool | None = None,
    shared_owners: Collection[int] = (),
    stacks: Sequence[ThreadStack] = (),
) -> list[FutexWait]:
    """Every thread of `pid` blocked in a futex wait, with the mutex owner where there is one.

    `threads`: the process's threads as a sample saw them (default: read /proc now; they
    need syscall_args). `python`: the process is a Python interpreter (default: from its
    exe/argv). `shared_owners`: TIDs a process-shared mutex's owner may have besides the
    process's own (the rest of the tree). `stacks`: py-spy stacks, to say where a Python
    thread waits."""
    if threads is None:
        threads = procfs.read_threads(pid)
    # the native futex number; a 32-bit process's syscall numbers are others: not read
    number = -1 if procfs.is_32bit(pid) else FUTEX_SYSCALL.get(platform.machine(), -1)
    names = {t.tid: t.name for t in threads}
    owners = frozenset(names)
    shared = frozenset(shared_owners) | owners
    if python is None:
        live = procfs.live_tid(pid, threads)
        python = live is not None and procfs.is_python(*procfs.exe_cmdline(pid, live))
    waits = [
        _classify(pid, th, names, owners, shared)
        for th in threads
        if th.syscall == str(number) and len(th.syscall_args) >= 4
    ]
    waits = _mark_pi_parked(pid, waits)
    if python:
        waits = [w if w.what.is_mutex else _python_note(w, stacks) for w in waits]
    return waits


# glibc's pthread_mutex_lock, when FUTEX_LOCK_PI fails with EDEADLK or ESRCH, waits forever
# on `&(unsigned int){0}`: a word of its own frame, just above the futex syscall's stack
# pointer (84 bytes on x86_64 glibc 2.36). Only a thread that owns a contended PI mutex is
# taken for one: a condition variable on the stack looks the same from /proc.
_PARK_REACH = 256
_PARKED = (
    "holds a contended PI mutex and waits forever on a word of its own stack: glibc parks "
    "a thread so when FUTEX_LOCK_PI fails with EDEADLK (the kernel found a PI deadlock) "
    "or ESRCH (the owner died); the mutex it wanted is not in the syscall"
)


def _mark_pi_parked(pid: int, waits: list[FutexWait]) -> list[FutexWait]:
    pi_owners = {w.owner for w in waits if w.what is FutexKind.PI_MUTEX and w.owner is not None}
    out = []
    for w in waits:
        if w.what is FutexKind.NOT_A_MUTEX and w.tid in pi_owners and w.value == 0 and not w.timed:
            fields = (procfs.read_proc(f"/proc/{pid}/task/{w.tid}/syscall") or "").split()
            sp = int(fields[7], 16) if len(fields) > 7 and fields[0] != "running" else None
            if sp is not None and 0 <= w.futex - sp < _PARK_REACH:
                w = dataclasses.replace(w, what=FutexKind.PI_MUTEX, pi_parked=True, how=_PARKED)
        out.append(w)
    return out


# ---------------------------------------------------------------- the graph


def find_cycles(waits: Iterable[FutexWait]) -> list[list[CycleStep]]:
    """Cycles thread → mutex → owner thread → ... over the waits with a known owner. Each
    thread waits for one mutex at most, so every thread is on at most one cycle; each
    cycle starts at its smallest tid.

    A PI deadlock is closed by the kernel's own finding: the thread glibc parked after
    EDEADLK (pi_parked) wanted a mutex held by the head of the one chain of waits that
    ends at it; its step's mutex is None (not known). With several chains ending at it,
    nothing is inferred."""
    waits = list(waits)
    edges = {w.tid: w for w in waits if w.owner is not None}
    done: set[int] = set()
    cycles = []
    for start in sorted(edges):
        path: list[int] = []
        on_path: set[int] = set()
        tid: int | None = start
        while tid is not None and tid in edges and tid not in done and tid not in on_path:
            path.append(tid)
            on_path.add(tid)
            tid = edges[tid].owner
        if tid is not None and tid in on_path:
            loop = path[path.index(tid) :]
            first = loop.index(min(loop))
            loop = loop[first:] + loop[:first]
            cycles.append([CycleStep(t, edges[t].name, edges[t].futex) for t in loop])
        done.update(path)
    on_cycle = {s.tid for c in cycles for s in c}
    for w in waits:
        if w.pi_parked and w.tid not in on_cycle:
            cycle = _closed_by_kernel(w, edges)
            if cycle:
                cycles.append(cycle)
                on_cycle.update(s.tid for s in cycle)
    return sorted(cycles, key=lambda c: c[0].tid)


def _closed_by_kernel(parked: FutexWait, edges: dict[int, FutexWait]) -> list[CycleStep]:
    preds: dict[int, list[int]] = {}
    for w in edges.values():
        preds.setdefault(w.owner or 0, []).append(w.tid)
    chain = [parked.tid]  # backwards: the parked thread, who waits for it, ...
    while True:
        before = [t for t in preds.get(chain[-1], []) if t not in chain]
        if len(before) > 1:
            return []  # several chains end here: which one closes the cycle is not known
        if not before:
            break
        chain.append(before[0])
    if len(chain) < 2:
        return []
    loop = chain[::-1]  # head → ... → parked, and parked → head closes it
    steps = [CycleStep(t, edges[t].name, edges[t].futex) for t in loop[:-1]]
    steps.append(CycleStep(parked.tid, parked.name, None))
    first = min(range(len(steps)), key=lambda i: steps[i].tid)
    return steps[first:] + steps[:first]


def format_cycle(cycle: Sequence[CycleStep]) -> str:
    """One line: `a (tid 1) → mutex 0x… → b (tid 2) → mutex 0x… → a (tid 1)`."""
    mutex = ["?" if s.mutex is None else f"{s.mutex:#x}" for s in cycle]
    parts = [f"{s.name} (tid {s.tid}) → mutex {m}" for s, m in zip(cycle, mutex, strict=True)]
    return " → ".join([*parts, f"{cycle[0].name} (tid {cycle[0].tid})"]) if cycle else ""


def lock_graph(
    pid: int,
    *,
    tree: bool = False,
    python: bool | None = None,
    stacks: Sequence[ThreadStack] = (),
) -> LockGraph:
    """The futex waits of `pid` (and, with `tree`, of all its descendants) and the mutex
    wait-for cycles among them. `python` forces the Python rule on every process (default:
    each process's exe/argv decides); `stacks` are py-spy stacks, if the caller has them."""
    pids = [pid]
    with contextlib.suppress(psutil.Error):
        pids += [c.pid for c in psutil.Process(pid).children(recursive=True)] if tree else []
    threads = {p: procfs.read_threads(p) for p in pids}
    every = frozenset(t.tid for ts in threads.values() for t in ts)
    notes = []
    if platform.machine() not in FUTEX_SYSCALL:
        notes.append(f"futex waits not read on {platform.machine()} (x86_64, aarch64 only)")
    waits: list[FutexWait] = []
    for p in pids:
        if not threads[p]:
            continue
        if procfs.is_32bit(p):
            notes.append(f"pid {p}: a 32-bit process, its futex waits are not read")
            continue
        unreadable = [t.tid for t in threads[p] if t.syscall == ""]
        if unreadable:
            notes.append(
                f"pid {p}: syscall of {len(unreadable)} thread(s) unreadable "
                "(ptrace rights needed, as for gdb)"
            )
        waits += process_waits(p, threads[p], python=python, shared_owners=every, stacks=stacks)
    return LockGraph(waits, find_cycles(waits), notes)
