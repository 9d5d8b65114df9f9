"""The plugin's listener thread: it blocks on the watcher's pipe (its tid is left out of the
quiescence rule) and turns a verdict into the hung test's failure.

First it asks the main thread: SIGUSR2 through `pthread_kill`, whose handler raises
`HangDetected` (a BaseException: an `except Exception` in the test does not swallow it)
where the main thread waits: a lock acquire, a join, `Popen.wait`, a sleep. The handler
sets `acked` before it raises. No acknowledgement within ACK_S means the main thread is in
native code that does not return to Python (a ctypes call into a deadlocked C function:
the GIL is released there, so this thread still runs). Then the test's failure is written
to the resume state and pytest starts again in this process (`resume`), or, in an xdist
worker, the worker ends itself and the controller tells the crash with the verdict file.
"""

from __future__ import annotations

import contextlib
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.pytest_plugin import channel

ACK_S = 2.0  # the main thread's handler runs at its next bytecode: milliseconds if at all
CLEANED_S = 5.0  # the watcher kills the hung test's processes, then says so
SIGNAL = signal.SIGUSR2


class HangDetected(BaseException):
    """The watcher's verdict on the running test, raised in the main thread."""


@dataclass
class Control:
    """What the main thread and the listener share: the phase that runs (written by the
    main thread only) and the hang being delivered (written by the listener)."""

    seq: int = 0
    nodeid: str = ""
    when: str = "idle"
    pending: channel.Hang | None = None
    acked: threading.Event = field(default_factory=threading.Event)
    interrupted: set[int] = field(default_factory=set)  # seqs already interrupted once
    hangs: int = 0  # hangs answered in this process


def install_handler(ctl: Control) -> object | None:
    """The SIGUSR2 handler (main thread only); the previous one, or None if not possible."""

    def on_signal(signum: int, frame: object) -> None:
        hang = ctl.pending
        if hang is None or hang.seq != ctl.seq:
            return  # the test moved on: this verdict is stale
        ctl.pending = None
        ctl.acked.set()
        raise HangDetected(hang.message)

    try:
        return signal.signal(SIGNAL, on_signal)
    except ValueError:  # not the main thread: interrupting is not possible
        return None


class Listener(threading.Thread):
    """Reads the watcher's messages; `stuck` is called (in this thread) when the main thread
    cannot be interrupted, and returns the answer it will act on (EXEC or EXIT), then
    `act` runs after the watcher's cleanup."""

    def __init__(
        self,
        ctl: Control,
        fd_in: int,
        fd_out: int,
        can_interrupt: bool,
        stuck: Callable[[channel.Hang], str],
        act: Callable[[channel.Hang, str], None],
    ) -> None:
        super().__init__(name="hang-watch-listener", daemon=True)
        self.ctl = ctl
        self.lines = channel.Lines(fd_in)
        self.fd_out = fd_out
        self.can_interrupt = can_interrupt
        self.stuck = stuck
        self.act = act
        self.ready = threading.Event()
        self.tid = 0

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.ready.set()
        while not self.lines.eof:
            for msg in self.lines.read():
                if msg.get("t") == "hang":
                    hang = channel.Hang.from_json(msg)
                    if hang is not None:
                        self._deliver(hang)

    def _deliver(self, hang: channel.Hang) -> None:
        ctl = self.ctl
        if hang.seq != ctl.seq:
            self._answer(hang, channel.MOVED)
            return
        if self.can_interrupt and hang.seq not in ctl.interrupted:
            ctl.acked.clear()
            ctl.pending = hang
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(threading.main_thread().ident or 0, SIGNAL)
            if ctl.acked.wait(ACK_S):
                ctl.interrupted.add(hang.seq)
                ctl.hangs += 1
                self._answer(hang, channel.INTERRUPTED)
                return
            ctl.pending = None
        if hang.seq != ctl.seq:  # it went on by itself meanwhile
            self._answer(hang, channel.MOVED)
            return
        ctl.hangs += 1
        how = self.stuck(hang)
        self._answer(hang, how)
        self.act(hang, how)

    def _answer(self, hang: channel.Hang, how: str) -> None:
        """Answer, then wait (bounded) for the watcher's cleanup of the test's processes."""
        if not channel.send(self.fd_out, {"t": "answer", "seq": hang.seq, "how": how}):
            return
        end = time.monotonic() + CLEANED_S
        while not self.lines.eof:
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                ready, _, _ = select.select([self.lines.fd], [], [], left)
            except InterruptedError:
                continue
            if not ready:
                return
            if any(m.get("t") == "cleaned" for m in self.lines.read()):
                return
