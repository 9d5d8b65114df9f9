"""When a timed wait ends by itself (docs/quiescence.md, "Deadlines"): the timeout a
blocked syscall was given, read from its arguments or the timespec they point to, turned
into the earliest moment its timer can end it. A wait whose earliest end lies past the
run's wall limit (the verdict's horizon) ends after the harness has given its verdict
anyway: for the wake graph it is blocked, and the chain says when it would end.

Two kinds of timeout, and why each bound is safe:

- **absolute** (a futex `FUTEX_WAIT_BITSET`/`FUTEX_LOCK_PI`, `clock_nanosleep` with
  `TIMER_ABSTIME`, `futex_waitv`): the deadline is the value itself on its clock, exact.
  glibc's timed condition, semaphore and lock waits and CPython's `time.sleep` take this
  form;
- **relative** (`nanosleep`, `poll`, `epoll_wait`, `select`, `ppoll`, `pselect6`,
  `FUTEX_WAIT`): the deadline is the call's start plus the value, and the start is not
  shown. The watch loop gives a lower bound of it (`started_after`): the last look that saw
  the thread in anything else, or else the thread's own start (/proc stat field 22). The
  deadline is then at least that bound plus the value: never later than the truth, so a
  wait is never called past the horizon when it is not.

A clock this module does not know (a CPU-time clock, a clock of a time namespace it cannot
read) gives no deadline: the wait stays timed. Reads are of the waiting thread's own memory
(`read`), bounded, and never raise.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.sampling.model import Snapshot
from harness.sampling.waits import (
    FUTEX_CLOCK_REALTIME,
    FUTEX_LOCK_PI,
    FUTEX_LOCK_PI2,
    FUTEX_WAIT,
    FUTEX_WAIT_BITSET,
    FUTEX_WAIT_REQUEUE_PI,
    Deadline,
    futex_cmd,
)

CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME = 0, 1, 7
# clocks whose "now" this process can read as the waiter's kernel counts it (the CPU-time
# clocks 2 and 3 count the waiter's own CPU, which a sleeper never uses: they are left out)
_CLOCKS = {0: "realtime", 1: "monotonic", 4: "monotonic", 5: "realtime", 6: "monotonic"}
_CLOCKS |= {7: "boottime", 8: "realtime", 9: "boottime", 11: "tai"}
TIMER_ABSTIME = 1
# the blocking calls that take a timeout this module reads
TIMED_CALLS = frozenset(
    {"futex", "futex_waitv", "nanosleep", "clock_nanosleep", "poll", "ppoll", "select"}
    | {"pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2"}
)
_MAX_S = 1 << 40  # a timeout past this (about 35,000 years) is no timeout at all

# read(address, size) → the waiter's bytes, or None
Read = Callable[[int, int], bytes | None]


@dataclass(frozen=True)
class Timeout:
    """A syscall's timeout as given: `seconds` on `clock`, absolute or relative to the call."""

    seconds: float
    absolute: bool
    clock: int = CLOCK_MONOTONIC


def _timespec(read: Read, address: int, micro: bool = False) -> float | None:
    """A struct timespec (or timeval, `micro`) at `address`: 64-bit seconds, then nano- or
    microseconds (x86_64 and aarch64)."""
    if not address:
        return None
    data = read(address, 16)
    if data is None or len(data) != 16:
        return None
    sec, frac = struct.unpack("<qq", data)
    if sec < 0 or frac < 0 or sec > _MAX_S:
        return None
    return float(sec) + float(frac) / (1e6 if micro else 1e9)


def _millis(value: int) -> float | None:
    """An int timeout in milliseconds (poll, epoll_wait): negative is forever."""
    value &= 0xFFFFFFFF
    return None if value >= 1 << 31 else value / 1000


def timeout_of(name: str, args: Sequence[int], read: Read) -> Timeout | None:
    """The timeout of a blocked syscall, or None (untimed, unreadable, or not a wait this
    module knows)."""
    if len(args) < 6:
        return None
    if name == "futex":
        cmd = futex_cmd(args[1])
        realtime = bool(args[1] & FUTEX_CLOCK_REALTIME)
        clock = CLOCK_REALTIME if realtime else CLOCK_MONOTONIC
        value = _timespec(read, args[3])
        if value is None:
            return None
        if cmd == FUTEX_WAIT:  # relative, on CLOCK_MONOTONIC
            return Timeout(value, absolute=False)
        if cmd in (FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2):
            return Timeout(value, absolute=True, clock=clock)
        if cmd == FUTEX_LOCK_PI:  # absolute, always CLOCK_REALTIME
            return Timeout(value, absolute=True, clock=CLOCK_REALTIME)
        return None
    if name == "futex_waitv":
        value = _timespec(read, args[3])
        return None if value is None else Timeout(value, absolute=True, clock=int(args[4]))
    if name == "nanosleep":
        value = _timespec(read, args[0])
        return None if value is None else Timeout(value, absolute=False)
    if name == "clock_nanosleep":
        value = _timespec(read, args[2])
        if value is None or int(args[0]) not in _CLOCKS:
            return None  # a CPU-time clock may run faster than the wall: no bound
        return Timeout(value, absolute=bool(args[1] & TIMER_ABSTIME), clock=int(args[0]))
    if name in ("poll", "epoll_wait", "epoll_pwait"):
        ms = _millis(args[2] if name == "poll" else args[3])
        return None if ms is None else Timeout(ms, absolute=False)
    if name in ("ppoll", "epoll_pwait2"):
        value = _timespec(read, args[2] if name == "ppoll" else args[3])
        return None if value is None else Timeout(value, absolute=False)
    if name in ("select", "pselect6"):
        value = _timespec(read, args[4], micro=name == "select")
        return None if value is None else Timeout(value, absolute=False)
    return None


def clock_now(clock: int, offsets: dict[str, float] | None = None) -> float | None:
    """`clock`'s value now, as the waiter reads it (`offsets`: its time namespace's
    monotonic and boottime offsets); None for a clock not known here."""
    kind = _CLOCKS.get(clock)
    if kind is None:
        return None
    if kind == "realtime":
        return time.clock_gettime(time.CLOCK_REALTIME)
    if kind == "tai":
        return time.clock_gettime(time.CLOCK_TAI)
    base = time.clock_gettime(time.CLOCK_MONOTONIC if kind == "monotonic" else time.CLOCK_BOOTTIME)
    return base + (offsets or {}).get(kind, 0.0)


def deadline(
    timeout: Timeout,
    started_after: float | None,
    limit_at: float | None,
    offsets: dict[str, float] | None = None,
) -> Deadline | None:
    """The deadline of a wait with `timeout`, seen now. `started_after`: time.monotonic()
    before which the call cannot have started (the relative bound); `limit_at`:
    time.monotonic() of the run's wall limit."""
    now = time.monotonic()
    limit_s = None if limit_at is None else limit_at - now
    if timeout.absolute:
        current = clock_now(timeout.clock, offsets)
        if current is None:
            return None
        return Deadline(max(0.0, timeout.seconds - current), exact=True, limit_s=limit_s)
    if started_after is None:
        return None
    return Deadline(max(0.0, started_after + timeout.seconds - now), exact=False, limit_s=limit_s)


def relative_offsets(theirs: dict[str, float], ours: dict[str, float]) -> dict[str, float]:
    """The waiter's clock offsets as seen from here: its namespace's minus ours."""
    keys = set(theirs) | set(ours)
    return {k: theirs.get(k, 0.0) - ours.get(k, 0.0) for k in keys}


def parse_offsets(text: str | None) -> dict[str, float]:
    """/proc/PID/timens_offsets ("monotonic 0 0\\nboottime 5 0"): each clock's offset in the
    process's time namespace, in seconds ({} when unreadable: no namespace)."""
    out: dict[str, float] = {}
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) == 3 and words[0] in ("monotonic", "boottime"):
            try:
                out[words[0]] = int(words[1]) + int(words[2]) / 1e9
            except ValueError:
                continue
    return out


Key = tuple[int, int]
_Call = tuple[str, str, tuple[int, ...]]  # a thread's state, syscall and its arguments


class CallClock:
    """Each thread's current call (state, syscall, arguments) and the bound on when it
    began that a relative timeout counts from: the last look that saw the thread in
    anything else (time.monotonic()), or None when no look did (its own start is then the
    bound)."""

    def __init__(self) -> None:
        self._since: dict[Key, tuple[_Call, float | None]] = {}

    def look(self, snap: Snapshot, prev_at: float | None) -> None:
        """One look (`prev_at`: time.monotonic() of the look before, None at the first)."""
        out: dict[Key, tuple[_Call, float | None]] = {}
        for proc in snap.processes:
            for th in proc.threads:
                key = (proc.pid, th.tid)
                call = (th.state, th.syscall, tuple(th.syscall_args))
                seen = self._since.get(key)
                if seen is not None and seen[0] == call:
                    out[key] = seen
                elif seen is not None:  # seen at the look before in another call
                    out[key] = (call, prev_at)
                else:
                    out[key] = (call, None)
        self._since = out

    def starts(self) -> dict[Key, float | None]:
        return {key: since for key, (_, since) in self._since.items()}
