"""What a polling loop polls (docs/quiescence.md, "Polling loops"): when a window's verdict
(startup, stall, wall) lands on a wake chain that ends at a thread asleep on a timer, that
thread's syscalls are traced for a second (`strace -p TID`, detached by SIGINT; bounded
in time, lines and bytes) and told in words: the path it keeps trying (with the file's age,
and the pid its content names, if any, and whether that pid still exists), or the calls it
makes, and how often.

A timed loop around a check that never becomes true is a hang that no wait shows: /proc
sees a thread asleep, the trace sees what it wakes up to look at.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from harness.process import reaper
from harness.process.tools import find_tool

TRACE_S = 1.0
_MAX_BYTES = 1 << 20
_DETACH_S = 2.0  # strace detaches on SIGINT; past this it is killed (the kernel detaches)
_CALL = re.compile(r'^(?:\[pid\s+\d+\]\s+)?(\w+)\((?:AT_FDCWD, |-?\d+, )?"([^"]{1,4096})"')
_NAME = re.compile(r"^(?:\[pid\s+\d+\]\s+)?(\w+)\(")
_RESULT = re.compile(r"= (-?\d+|0x[0-9a-f]+)(?: (E[A-Z]+))?")
_SLEEPS = ("clock_nanosleep", "nanosleep", "select", "pselect6", "poll", "ppoll", "futex")


# a lock tried without waiting that the kernel refused: fcntl F_SETLK / F_OFD_SETLK (a
# POSIX or OFD lock, SQLite's and lockf's), flock LOCK_NB (filelock's, flock -n's)
_TRYLOCK = re.compile(
    r"^(?:\[pid\s+\d+\]\s+)?(fcntl|fcntl64|flock)\((\d+), "
    r"(F_SETLK64|F_SETLK|F_OFD_SETLK|LOCK_[A-Z]+\|LOCK_NB|LOCK_NB\|LOCK_[A-Z]+)\b"
    r".*= -1 (EAGAIN|EACCES|EWOULDBLOCK)"
)
# calls that only look (at a file, a lock, the clock): a loop of these and sleeps has no
# effect but its check
_LOOKS = frozenset(
    {"newfstatat", "fstat", "stat", "lstat", "statx", "access", "faccessat", "faccessat2"}
    | {"pread64", "lseek", "fcntl", "fcntl64", "flock", "getpid", "gettid", "clock_gettime"}
    | {"openat", "open", "close", "getppid", "sched_yield"}
)


@dataclass
class PollTrace:
    """One thread's syscalls over `seconds`."""

    seconds: float
    calls: Counter[str] = field(default_factory=Counter)
    paths: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (path, call, err)
    # (fd, call, command) of the locks it tried and was refused, and how often
    trylocks: Counter[tuple[int, str, str]] = field(default_factory=Counter)
    # fd → the path an open in the trace gave it (a loop that opens, tries and closes)
    opened: dict[int, str] = field(default_factory=dict)

    def only_checks(self) -> bool:
        """Every call is a sleep or a look (a stat, a read, a lock tried): a loop with no
        effect but its check, whose sleeps re-arm the same wait."""
        return bool(self.calls) and all(c in _SLEEPS or c in _LOOKS for c in self.calls)

    def polls(self) -> bool:
        """It does something between its sleeps (tries a path, makes other calls): a loop
        that checks, not a thread that only sleeps."""
        return bool(self.paths) or any(c not in _SLEEPS for c in self.calls)

    def words(self, now: float | None = None) -> str:
        if not self.calls:
            return f"made no syscall in {self.seconds:.1f}s of tracing"
        if self.paths:
            (path, call, err), n = self.paths.most_common(1)[0]
            every = f", every ~{self.seconds / n:.2f}s" if n > 1 else ""
            result = f" → {err}" if err else ""
            return f"polls {path} ({call}{result}) {n} times in {self.seconds:.1f}s{every}" + (
                _about(path, now)
            )
        busy = [(c, n) for c, n in self.calls.most_common() if c not in _SLEEPS][:3]
        slept = sum(n for c, n in self.calls.items() if c in _SLEEPS)
        made = ", ".join(f"{c} ×{n}" for c, n in busy) or "only sleeps"
        return f"in {self.seconds:.1f}s: {made}; {slept} timed sleep(s) or wait(s)"


def _about(path: str, now: float | None) -> str:
    """The polled file: its age, the pid its content names and whether that pid lives."""
    try:
        st = os.stat(path)
    except OSError:
        return "; it does not exist"
    age = (time.time() if now is None else now) - st.st_mtime
    out = f"; it was last written {age:.0f}s ago"
    try:
        with open(path, "rb") as f:
            head = f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return out
    if head.isdigit() and 0 < int(head) < 1 << 22:
        pid = int(head)
        alive = os.path.exists(f"/proc/{pid}")
        out += f" and names pid {pid}, which " + ("is alive" if alive else "no longer exists")
    return out


def parse(text: str, seconds: float) -> PollTrace:
    out = PollTrace(seconds)
    for line in text.splitlines():
        m = _NAME.match(line)
        if m is None or m.group(1) in ("strace", "restart_syscall"):
            continue
        out.calls[m.group(1)] += 1
        tried = _TRYLOCK.match(line)
        if tried is not None:
            out.trylocks[(int(tried.group(2)), tried.group(1), tried.group(3))] += 1
        found = _CALL.match(line)
        if found is not None:
            res = _RESULT.search(line)
            err = (res.group(2) or "") if res else ""
            out.paths[(found.group(2), found.group(1), err)] += 1
            if found.group(1) in ("openat", "open") and res is not None and not err:
                with contextlib.suppress(ValueError):
                    out.opened[int(res.group(1))] = found.group(2)
    return out


class Tracing:
    """A trace of one thread under way (strace -p TID), its output in a temporary file:
    started at once, ended by `finish` (the watch loop goes on meanwhile); `close` ends it
    unread, on every path."""

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.started = time.monotonic()
        self.error = ""
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finish or close)
        except OSError as exc:
            self._out = io.BytesIO()  # type: ignore[assignment]  # nothing to read back
            self.error = f"strace: no file for its output: {exc}"
            return
        exe = find_tool("strace")
        if exe is None:
            self.error = "no strace (setup.sh installs Debian's package)"
            return
        argv = [exe, "-qq", "-e", "signal=none", "-s", "256", "-p", str(tid)]
        # through the PR_SET_PDEATHSIG wrapper: a harness (or a pytest watcher) killed while
        # a trace is under way takes the tracer with it, and the kernel detaches the thread
        status_r, status_w = os.pipe()
        try:
            try:
                self._proc = subprocess.Popen(
                    reaper.pdeathsig_argv(argv, status_w),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=self._out,
                    start_new_session=True,
                    pass_fds=(status_w,),
                )
            finally:
                os.close(status_w)  # the child's copy is its own: EOF once it exec'd
            failed = reaper.exec_status(status_r)
            if failed is not None:
                self.error = f"strace: {os.strerror(failed)}"
        except OSError as exc:
            self.error = f"strace: {exc}"
        finally:
            os.close(status_r)

    @property
    def pid(self) -> int | None:
        """The tracer's pid (a child of this process, never a member of the run)."""
        return self._proc.pid if self._proc is not None else None

    def finish(self) -> PollTrace | str:
        """Detach (SIGINT: the thread goes on untouched) and read what was traced."""
        seconds = time.monotonic() - self.started
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=_DETACH_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=_DETACH_S)
        self._out.seek(0)
        text = self._out.read(_MAX_BYTES).decode("utf-8", "replace")
        self.close()
        if self.error:
            return self.error
        if "Operation not permitted" in text and "attach" in text:
            return "strace: ptrace refused"
        return parse(text, seconds)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=_DETACH_S)
        self._out.close()


def trace(tid: int, seconds: float = TRACE_S) -> PollTrace | str:
    """The thread's syscalls for `seconds`, or why they could not be traced."""
    tracing = Tracing(tid)
    if tracing.error:
        tracing.close()
        return tracing.error
    try:
        time.sleep(seconds)
        return tracing.finish()
    finally:
        tracing.close()
