"""Restarted syscalls (docs/quiescence.md, "What waits on the tree"): a wait interrupted by
a signal or a tracer's stop resumes as restart_syscall, and is judged as the call it
continues when the look before saw that call with the same arguments. Pure, over
snapshots."""

from __future__ import annotations

from dataclasses import replace

from harness.sampling.model import Snapshot
from harness.watch.syscalls import SyscallTable

# A syscall interrupted by a signal or a stop (a tracer's attach: the harness's own stack
# dump, py-spy, gdb) with no handler to run resumes as restart_syscall when it keeps its
# state in the kernel's restart block: poll (timed or not), a timed futex wait, a relative
# nanosleep. /proc then shows restart_syscall, but the argument registers are those of the
# original call, untouched (the kernel only rewinds the instruction pointer and sets the
# syscall number), and the thread sleeps in the same kernel function (wchan).
Calls = dict[tuple[int, int], tuple[str, tuple[int, ...], str]]  # (pid, tid) → (nr, args, wchan)
RESTARTED = "continued by restart_syscall after an interruption (same arguments)"


_SLEEPS = ("nanosleep", "clock_nanosleep")
_FUTEX_WCHAN = ("futex_wait_queue", "futex_do_wait", "futex_wait")  # by kernel version


def _same_sleep(table: SyscallTable, seen: tuple[str, tuple[int, ...], str], wchan: str) -> bool:
    """The thread sleeps where the call it continues slept: the same wchan, except after a
    nanosleep, whose restart (hrtimer_nanosleep_restart) shows the syscall entry as its
    wchan; its six arguments, the same, already tie it to that call."""
    return seen[2] == wchan or (seen[0].isdigit() and table.name(int(seen[0])) in _SLEEPS)


def continued(
    snap: Snapshot, table: SyscallTable | None, calls: Calls
) -> tuple[Snapshot, Calls, set[tuple[int, int]]]:
    """The snapshot as the rule judges it, the calls to remember for the next look, and the
    threads judged as continued: a thread in restart_syscall whose previous look showed
    another syscall with the same six arguments and the same wchan is that syscall,
    continued (a poll with no timeout stays one); otherwise restart_syscall is judged as
    such (timed: its timeout is not shown). `calls`: each thread's last syscall seen that
    was not restart_syscall, with its arguments and wchan."""
    if table is None:
        return snap, {}, set()
    memory: Calls = {}
    restarted: set[tuple[int, int]] = set()
    nr = table.number("futex")
    futex = None if nr is None else str(nr)
    procs = []
    for proc in snap.processes:
        threads = []
        for th in proc.threads:
            key = (proc.pid, th.tid)
            if th.state != "S" or not th.syscall.isdigit() or len(th.syscall_args) < 6:
                threads.append(th)
                continue
            args = tuple(th.syscall_args)
            if table.name(int(th.syscall)) != "restart_syscall":
                memory[key] = (th.syscall, args, th.wchan)
                threads.append(th)
                continue
            seen = calls.get(key)
            if seen is None and th.wchan.startswith(_FUTEX_WCHAN) and futex is not None:
                # not seen before its interruption, but asleep in the futex wait code: only a
                # timed futex wait resumes so (an untimed one is re-issued as futex itself),
                # and its argument registers are the original call's
                seen = (futex, args, th.wchan)
            if seen is not None and seen[1] == args and _same_sleep(table, seen, th.wchan):
                memory[key] = seen
                restarted.add(key)
                th = replace(th, syscall=seen[0])
            threads.append(th)
        procs.append(replace(proc, threads=threads))
    if not restarted:
        return snap, memory, restarted
    return replace(snap, processes=procs), memory, restarted
