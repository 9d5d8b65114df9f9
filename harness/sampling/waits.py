"""The wait model: what one thread waits on, in the words and types every reader shares.

A wait is read from three kinds of fact, each by a module of its own layer, into the types
here:

- **its syscall and the kernel's facts** (watch/quiescence, with watch/fdwaits for fds and
  watch/wakeread for who holds what): `Wait`, the quiescence rule's judgement of one thread
  at one look (docs/quiescence.md), and who alone could end it (the wake graph,
  watch/wakegraph). report.json keeps it as a `ThreadWait` (`samples.waits`,
  `Wait.recorded`);
- **its futex word in memory** (sampling/locks): a `FutexWait`, the pthread mutex and its
  owner, for the mutex wait-for graph; the futex(2) ABI both readers decode is below
  (`FUTEX_*`, `futex_cmd`);
- **its stack** (analysis/waitchain, analysis/pystacks): a `Waiter`, a thread that only
  waits, for a child, a result or a thread (`WaitsFor`), by the call it waits in
  (`WAIT_CALLS`; the Python APIs a detector names: `CHILD_WAITS`, `POOL_WAITS`,
  `LOCK_WAITS`), and `CHILD_WAIT`, a recorded wait4/waitid's words.

What a thread waits on, by kind, is `vocab.WaitKind` (tree, outside, timed …) and, by
kernel object, `vocab.WaitVia` (futex, mutex, pipe, socket …)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.vocab import FutexKind, WaitKind, WaitsFor, WaitVia

# ---------------------------------------------------------------- futex(2)

# the commands that block (the op without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME); for
# each, argument 4 (index 3) is the timeout pointer, NULL = forever. glibc's untimed waits
# (mutex, condvar, semaphore, join) pass NULL; its timed ones pass an absolute time with
# FUTEX_WAIT_BITSET (FUTEX_CLOCK_REALTIME for CLOCK_REALTIME waits)
FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET = 0, 6, 9
FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2 = 11, 13
FUTEX_WAITS = {
    FUTEX_WAIT: "FUTEX_WAIT",
    FUTEX_LOCK_PI: "FUTEX_LOCK_PI",
    FUTEX_WAIT_BITSET: "FUTEX_WAIT_BITSET",
    FUTEX_WAIT_REQUEUE_PI: "FUTEX_WAIT_REQUEUE_PI",
    FUTEX_LOCK_PI2: "FUTEX_LOCK_PI2",
}
# FUTEX_PRIVATE_FLAG: the kernel keys the futex on the address space, so only its own
# process can wake it
FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME = 128, 256
FUTEX_WAITERS, FUTEX_OWNER_DIED, FUTEX_TID_MASK = 0x80000000, 0x40000000, 0x3FFFFFFF


def futex_cmd(op: int) -> int:
    """A futex op's command, without its flags."""
    return op & ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME) & 0xFFFFFFFF


# ---------------------------------------------------------------- by the syscall


@dataclass(frozen=True)
class FutexWait:
    """One thread blocked in a futex wait, and what holds it (sampling/locks reads it from
    the futex word and the mutex around it)."""

    pid: int
    tid: int
    name: str  # the thread's comm
    futex: int  # address of the futex word, in pid's address space
    op: int  # the raw futex op (FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME included)
    value: int  # the value the thread expects in the word (arg2)
    timed: bool  # the wait has a timeout: it ends on its own
    what: FutexKind
    owner: int | None  # TID of the thread holding the mutex, when known
    how: str  # how the owner is known, or why not
    # parked for good by glibc after FUTEX_LOCK_PI failed with EDEADLK (the kernel found a
    # PI deadlock) or ESRCH (the owner died): the wanted mutex is not in the syscall
    pi_parked: bool = False

    @property
    def op_name(self) -> str:
        cmd = futex_cmd(self.op)
        name = FUTEX_WAITS.get(cmd, f"futex op {cmd}")
        return name + ("_PRIVATE" if self.op & FUTEX_PRIVATE_FLAG else "")


@dataclass(frozen=True)
class Deadline:
    """When a timed wait ends by itself (watch/deadlines.py): `left_s` seconds after the
    look at the earliest (`exact`: then, to the tick; else at least then), and `limit_s`,
    the seconds left before the run's wall limit at that look (None: no limit known)."""

    left_s: float
    exact: bool
    limit_s: float | None = None

    @property
    def past(self) -> bool:
        """It ends only after the run's limit: blocked, as far as the verdict is concerned."""
        return self.limit_s is not None and self.left_s > self.limit_s

    def words(self) -> str:
        """ "it ends by itself in about 540 s, after the run's limit (in 58 s)"."""
        when = f"in {_seconds(self.left_s)}" + ("" if self.exact else " or later")
        if self.limit_s is None or self.limit_s <= 0:
            return f"it ends by itself {when}"  # no limit, or read at the limit itself
        side = "after" if self.past else "before"
        return f"it ends by itself {when}, {side} the run's limit (in {_seconds(self.limit_s)})"


def _seconds(s: float) -> str:
    if s >= 7200:
        return f"about {s / 3600:.0f} h"
    if s >= 100:
        return f"about {s:.0f} s"
    return f"{s:.1f} s"


@dataclass(frozen=True)
class Wait:
    """One thread's wait, by the rule. `idle`: it can end only by time or by the tree (a
    sleep, a timed futex wait, a timed poll on tree fds): a housekeeping candidate.
    `pending`: "fd" (a read or write on `fd`) or "poll" (the thread's polled fds), facts to
    read before it can be judged."""

    kind: WaitKind
    what: str
    fd: int | None = None
    on: str = ""
    peers: tuple[int, ...] = ()
    idle: bool = False
    pending: str = ""
    # the wake graph (watch/wakegraph.py): the processes any thread of which could end this wait,
    # or (`owners`, narrower) the very threads that can (a mutex's owner); `resolved` says
    # the list is all of them, read from the kernel's facts, with nothing outside
    wakers: tuple[int, ...] = ()
    owners: tuple[tuple[int, int], ...] = ()
    resolved: bool = False
    # what kind of object it waits on (a pipe, a socket, a file lock, …): the graph's
    # readings (the wake-chain causes) match on it
    via: WaitVia = WaitVia.OTHER
    # on memory of its own process alone (a futex with FUTEX_PRIVATE_FLAG): no other process
    # could ever have ended it, not even one that has exited since
    private: bool = False
    # a timed wait whose timer ends it only after the run's wall limit (watch/deadlines.py):
    # the seconds left at the look (at least), and the wait counts as untimed for the graph
    late_s: float | None = None

    def recorded(self, pid: int, tid: int) -> ThreadWait:
        """This wait as report.json keeps it (samples.waits): its wakers only when they are
        all of them."""
        return ThreadWait(
            pid,
            tid,
            self.kind,
            self.what,
            self.on,
            list(self.peers),
            self.idle,
            list(self.wakers) if self.resolved else [],
            self.via,
            self.private,
            None if self.late_s is None else round(self.late_s, 1),
        )


@dataclass
class ThreadWait:
    """What one thread waits on at the trigger, by the quiescence rule."""

    pid: int
    tid: int
    kind: WaitKind
    what: str  # "futex wait, no timeout", "wait4 for child 1234 (in the tree)", ...
    # what it waits on, for the detectors that follow waits: "pipe:[123]", "child:456",
    # "futex:0x7f00…", "socket:[789]", "" when not known
    on: str = ""
    # the tree pids at the other end: the writers a read waits for, the readers a write
    # waits for, the child a wait4 waits for; [] when none or not known
    peers: list[int] = field(default_factory=list)
    # the thread only sleeps on a timer of its own (a sleep, a naturally timed wait), as
    # opposed to a wait made timed by a timer the process may get (SIGALRM, POSIX timers):
    # the `idle` mechanism counts only these
    idle: bool = False
    # the wake graph: the processes that alone could end the wait, when every one is known
    # (a private futex: its own process; a pipe: the other end's holders); [] when not known
    wakers: list[int] = field(default_factory=list)
    via: WaitVia = WaitVia.OTHER  # what kind of object it waits on (WakeLink.via)
    # on memory of its own process alone (a futex with FUTEX_PRIVATE_FLAG): no other process
    # could ever have ended it, not even one that has exited since
    private: bool = False
    # a timed wait whose timer ends it only after the run's wall limit: the seconds left at
    # the look, at least (docs/quiescence.md, "Deadlines"); null for any other wait
    late_s: float | None = None

    @property
    def child(self) -> int | None:
        """The one child a wait4/waitid waits for: as `on` names it ("child:N"), else as
        its words do; None for any child, or any other wait."""
        if self.on.startswith("child:") and self.on[6:].isdigit():
            return int(self.on[6:])
        m = CHILD_WAIT.match(self.what)
        return int(m[1]) if m and m[1] else None

    @property
    def children(self) -> list[int]:
        """Every child it waits for: the one it names, else those "any child (…)" lists."""
        one = self.child
        if one is not None:
            return [one]
        m = CHILD_WAIT.match(self.what)
        return [int(p) for p in re.findall(r"\d+", m[2])] if m and m[2] else []


# ---------------------------------------------------------------- by the stack


@dataclass(frozen=True)
class WaitCall:
    """A call that only waits: its function (full match) in one of `files` (any file
    when empty: native frames)."""

    waits_for: WaitsFor
    function: re.Pattern[str]
    files: tuple[str, ...] = ()

    def matches(self, function: str, file: str | None) -> bool:
        """A frame's function (and file) is this call."""
        if not self.files:  # glibc's internal names too: __GI___wait4, __libc_waitpid
            native = not (file or "").endswith(".py")
            return native and self.function.fullmatch(native_name(function)) is not None
        return bool(self.function.fullmatch(function)) and (file or "").endswith(self.files)


_FUTURES = (
    "concurrent/futures/_base.py",
    "concurrent/futures/thread.py",
    "concurrent/futures/process.py",
)
_MP_POPEN = ("popen_fork.py", "popen_spawn_posix.py", "popen_forkserver.py")
WAIT_CALLS: tuple[WaitCall, ...] = (
    WaitCall(
        WaitsFor.CHILD,
        re.compile(r"(Popen\.)?(wait|_wait|_try_wait|communicate)"),
        ("subprocess.py",),
    ),
    WaitCall(WaitsFor.CHILD, re.compile(r"(BaseProcess\.)?join"), ("multiprocessing/process.py",)),
    WaitCall(WaitsFor.CHILD, re.compile(r"(Popen\.)?(wait|poll)"), _MP_POPEN),
    WaitCall(
        WaitsFor.RESULT,
        re.compile(r"(Pool\.)?(map|starmap|apply|_map_async|imap\w*|next|__next__)"),
        ("multiprocessing/pool.py",),
    ),
    WaitCall(
        WaitsFor.RESULT,
        re.compile(r"(\w*Result\.)?(get|wait)|(IMapIterator\.)?(next|__next__)"),
        ("multiprocessing/pool.py",),
    ),
    WaitCall(
        WaitsFor.RESULT,
        re.compile(
            r"(Future\.)?(result|exception)|wait|as_completed|_result_or_cancel"
            r"|(\w*Executor\.)?(map|shutdown)|result_iterator|_chain_from_iterable_of_lists"
        ),
        _FUTURES,
    ),
    WaitCall(
        WaitsFor.THREAD, re.compile(r"(Thread\.)?(join|_wait_for_tstate_lock)"), ("threading.py",)
    ),
    WaitCall(WaitsFor.CHILD, re.compile(r"wait4|waitpid|waitid")),
    WaitCall(WaitsFor.THREAD, re.compile(r"pthread_(clock|timed)?join.*")),
)


@dataclass(frozen=True)
class Waiter:
    """A thread that only waits, what for, and the call it waits in ("Popen.wait")."""

    pid: int
    tid: int
    waits_for: WaitsFor
    call: str
    child: int | None = None  # the one child a wait4/waitid names


# the Python calls that wait for a child process, and the stdlib file each is in (a function
# of the program's own with the same name is not one): the outermost one found on a stack
# names the wait, its caller the line
CHILD_WAITS: dict[str, str] = {
    "Popen.wait": "subprocess.py",
    "Popen.communicate": "subprocess.py",
    "run": "subprocess.py",
    "call": "subprocess.py",
    "check_call": "subprocess.py",
    "check_output": "subprocess.py",
    "BaseProcess.join": "process.py",
}
# the Python calls that wait for a pool's results (multiprocessing.pool, concurrent.futures)
POOL_WAITS: dict[str, str] = {
    "Pool.map": "pool.py",
    "Pool.starmap": "pool.py",
    "Pool.apply": "pool.py",
    "ApplyResult.get": "pool.py",
    "ApplyResult.wait": "pool.py",
    "IMapIterator.next": "pool.py",
    "Future.result": "_base.py",
    "as_completed": "_base.py",
    "wait": "_base.py",
    "result_iterator": "_base.py",
    "_result_or_cancel": "_base.py",
}
# the Python calls a thread waits in for a lock or a condition (threading, logging,
# concurrent.futures), for fork-with-threads
LOCK_WAITS: dict[str, str] = {
    **{k: v for k, v in POOL_WAITS.items() if v == "_base.py"},
    "Condition.wait": "threading.py",
    "Event.wait": "threading.py",
    "Thread.join": "threading.py",
    "Handler.acquire": "__init__.py",
    "_acquireLock": "__init__.py",
}


def native_name(function: str) -> str:
    """A native function without glibc's internal prefixes: `__GI___wait4`, `__libc_waitpid`
    and `__wait4` are `wait4`, `waitpid`, `wait4`."""
    name = function.lstrip("_")
    for prefix in ("GI___", "GI_", "libc_"):
        name = name.removeprefix(prefix)
    return name.lstrip("_")


# a recorded wait4/waitid's words (ThreadWait.what): the child it names (group 1), or the
# children listed for "any child" (group 2)
CHILD_WAIT = re.compile(r"^(?:wait4|waitid) for (?:child (\d+)|any child(?: \(([\d, ]+))?)")
