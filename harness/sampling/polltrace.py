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
import os
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field

from harness.process.tools import find_tool

TRACE_S = 1.0
_MAX_BYTES = 1 << 20
_DETACH_S = 2.0  # strace detaches on SIGINT; past this it is killed (the kernel detaches)
_CALL = re.compile(r'^(?:\[pid\s+\d+\]\s+)?(\w+)\((?:AT_FDCWD, |-?\d+, )?"([^"]{1,4096})"')
_NAME = re.compile(r"^(?:\[pid\s+\d+\]\s+)?(\w+)\(")
_RESULT = re.compile(r"= (-?\d+|0x[0-9a-f]+)(?: (E[A-Z]+))?")
_SLEEPS = ("clock_nanosleep", "nanosleep", "select", "pselect6", "poll", "ppoll", "futex")


@dataclass
class PollTrace:
    """One thread's syscalls over `seconds`."""

    seconds: float
    calls: Counter[str] = field(default_factory=Counter)
    paths: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (path, call, err)

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
        found = _CALL.match(line)
        if found is not None:
            res = _RESULT.search(line)
            err = (res.group(2) or "") if res else ""
            out.paths[(found.group(2), found.group(1), err)] += 1
    return out


def trace(tid: int, seconds: float = TRACE_S) -> PollTrace | str:
    """The thread's syscalls for `seconds`, or why they could not be traced."""
    exe = find_tool("strace")
    if exe is None:
        return "no strace (setup.sh installs Debian's package)"
    argv = [exe, "-qq", "-e", "signal=none", "-s", "256", "-p", str(tid)]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return f"strace: {exc}"
    try:
        time.sleep(seconds)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)  # detach: the thread goes on untouched
        try:
            _, err = proc.communicate(timeout=_DETACH_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=_DETACH_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=_DETACH_S)
    text = err[:_MAX_BYTES].decode("utf-8", "replace")
    if "Operation not permitted" in text and "attach" in text:
        return "strace: ptrace refused"
    return parse(text, seconds)
