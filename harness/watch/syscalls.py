"""Syscall numbers per architecture, for the quiescence rule (docs/quiescence.md): the ones
the rule reads, and common blocking ones so that a report names them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.sampling.model import ThreadSample

# (name, x86_64, aarch64): the syscalls the rule reads, and common blocking ones so that a
# report names them. aarch64 uses the asm-generic numbers and has no poll, select, pause
# or epoll_wait.
_SYSCALLS: tuple[tuple[str, int, int | None], ...] = (
    ("read", 0, 63),
    ("readv", 19, 65),
    ("write", 1, 64),
    ("writev", 20, 66),
    ("futex", 202, 98),
    ("futex_waitv", 449, 449),
    ("wait4", 61, 260),
    ("waitid", 247, 95),
    ("nanosleep", 35, 101),
    ("clock_nanosleep", 230, 115),
    ("restart_syscall", 219, 128),
    ("ppoll", 271, 73),
    ("pselect6", 270, 72),
    ("epoll_pwait", 281, 22),
    ("epoll_pwait2", 441, 441),
    ("recvfrom", 45, 207),
    ("recvmsg", 47, 212),
    ("accept", 43, 202),
    ("accept4", 288, 242),
    ("connect", 42, 203),
    ("sendto", 44, 206),
    ("sendmsg", 46, 211),
    ("rt_sigsuspend", 130, 133),
    ("rt_sigtimedwait", 128, 137),
    ("sched_yield", 24, 124),
    ("io_getevents", 208, 4),
    ("io_uring_enter", 426, 426),
    ("flock", 73, 32),
    ("fcntl", 72, 25),
    ("semop", 65, 193),
    ("semtimedop", 220, 192),
    ("msgrcv", 70, 188),
    ("ioctl", 16, 29),
    ("openat", 257, 56),
    ("exit_group", 231, 94),
    ("clone", 56, 220),
    ("clone3", 435, 435),
    ("mmap", 9, 222),
    ("poll", 7, None),
    ("select", 23, None),
    ("pause", 34, None),
    ("epoll_wait", 232, None),
)


@dataclass(frozen=True)
class SyscallTable:
    arch: str
    names: Mapping[int, str]

    def name(self, number: int) -> str:
        return self.names.get(number, f"#{number}")

    def number(self, name: str) -> int | None:
        """A syscall's number on this architecture, None when the table lacks it."""
        return next((n for n, known in self.names.items() if known == name), None)


X86_64 = SyscallTable("x86_64", {x86: name for name, x86, _ in _SYSCALLS})
AARCH64 = SyscallTable("aarch64", {arm: name for name, _, arm in _SYSCALLS if arm is not None})
_MACHINES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def table_for(machine: str) -> SyscallTable | None:
    """The syscall numbers of `platform.machine()`, or None (quiescence is then off)."""
    return _MACHINES.get(machine.lower())


def syscall_name(th: ThreadSample, table: SyscallTable | None) -> str:
    """ "futex", "running", "" (unreadable), "-1" (blocked outside a syscall), "#N"."""
    if table is None or not th.syscall.isdigit():
        return th.syscall
    return table.name(int(th.syscall))
