"""The timers that may end a thread's wait by a signal (docs/quiescence.md, "Signals:
wakers only where they can arrive"): the interval-timer signals a process catches, its
POSIX timers with their signal and target (/proc/PID/timers), and each thread's signal
mask (SigBlk)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.sampling.procfs import read_proc

_BIG = 65536


# a handler for these means a timer (alarm, setitimer) may wake the process by a signal
_TIMER_SIGNALS = {14: "SIGALRM", 26: "SIGVTALRM", 27: "SIGPROF"}


def _status_mask(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        if line.startswith(key + ":"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return None
    return None


@dataclass(frozen=True)
class TimerSource:
    """A timer that may deliver a signal to a process: an interval timer whose signal it
    catches (alarm, setitimer: whether it is armed is not shown), or a POSIX timer
    (timer_create, /proc/PID/timers) with its signal and its target, a thread (`tid`) or
    the process (None)."""

    signal: int
    tid: int | None
    why: str


def _posix_timers(text: str) -> list[tuple[int, str, int]]:
    """(signal, "pid" | "tid", target) of each POSIX timer that notifies by a signal
    (`notify: signal/pid.123`; `none/...` delivers nothing; SIGEV_THREAD is glibc's helper
    thread, told by its tid)."""
    out: list[tuple[int, str, int]] = []
    signo: int | None = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "signal":
            head = value.split("/", 1)[0]
            signo = int(head) if head.isdigit() else None
        elif key == "notify" and signo is not None:
            how, _, target = value.partition("/")
            kind, _, num = target.partition(".")
            if how in ("signal", "thread") and kind in ("pid", "tid") and num.isdigit():
                out.append((signo, kind, int(num)))
            signo = None
    return out


def timer_sources(pid: int) -> list[TimerSource]:
    """The timers that may deliver a signal the process does not ignore."""
    status = read_proc(f"/proc/{pid}/status", _BIG)
    caught = _status_mask(status, "SigCgt") or 0
    ignored = _status_mask(status, "SigIgn") or 0
    out = [
        TimerSource(s, None, f"catches {n} (an alarm or interval timer may be armed)")
        for s, n in _TIMER_SIGNALS.items()
        if caught >> (s - 1) & 1
    ]
    for signo, kind, target in _posix_timers(read_proc(f"/proc/{pid}/timers", _BIG) or ""):
        if ignored >> (signo - 1) & 1:
            continue  # an ignored signal is discarded: it wakes nothing
        tid = target if kind == "tid" else None
        out.append(TimerSource(signo, tid, f"a POSIX timer sends it signal {signo}"))
    return out


def blocked_signals(pid: int, tid: int) -> int | None:
    """The thread's signal mask (SigBlk of /proc/PID/task/TID/status), None if unreadable."""
    return _status_mask(read_proc(f"/proc/{pid}/task/{tid}/status", _BIG), "SigBlk")
