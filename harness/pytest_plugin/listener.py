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

A phase is interrupted again (up to MAX_INTERRUPTS) while each interrupt is acknowledged:
a test can swallow the first into a wait of its own (`with ThreadPoolExecutor() as ex:
ex.submit(deadlock).result()` joins the deadlocked worker in `__exit__`), and that wait is
interruptible too. An error in this thread falls back to the EXIT path: this thread must
never die silently, or the watcher ends pytest without a word.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.pytest_plugin import channel
from harness.pytest_plugin.threads import started_since

MAX_INTERRUPTS = 3  # acknowledged interrupts of one phase before it counts as stuck
READY_S = 10.0  # the watcher says "ready" once it runs: seconds, if it started at all
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
    boot: float = 0.0  # the phase's start, seconds since boot (`procstart.now`)
    pending: channel.Hang | None = None
    acked: threading.Event = field(default_factory=threading.Event)
    interrupts: dict[int, int] = field(default_factory=dict)  # seq → acknowledged interrupts
    hangs: int = 0  # hangs answered in this process
    left: set[int] = field(default_factory=set)  # tids started in a phase that was interrupted


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
    cannot be interrupted and returns at once the answer it will act on (EXEC or EXIT);
    `act` runs after the watcher's cleanup (the slow part, saving the session, is there:
    the watcher waits for the answer a bounded time). `on_ready` gets the watcher's pid."""

    def __init__(
        self,
        ctl: Control,
        fd_in: int,
        fd_out: int,
        can_interrupt: bool,
        stuck: Callable[[channel.Hang], str],
        act: Callable[[channel.Hang, str], None],
        note: Callable[[str], None],
        on_ready: Callable[[int], None],
    ) -> None:
        super().__init__(name="hang-watch-listener", daemon=True)
        self.ctl = ctl
        self.lines = channel.Lines(fd_in)
        self.fd_out = fd_out
        self.can_interrupt = can_interrupt
        self.stuck = stuck
        self.act = act
        self.note = note
        self.on_ready = on_ready
        self.ready = threading.Event()
        self.tid = 0

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.ready.set()
        with contextlib.suppress(OSError, ValueError):
            readable, _, _ = select.select([self.lines.fd], [], [], READY_S)
            if not readable:
                self.note(
                    f"hang-watch: the watcher did not start within {READY_S:g}s; tests are "
                    "not watched until it does"
                )
        while not self.lines.eof:
            for msg in self.lines.read():
                if msg.get("t") == "ready":
                    with contextlib.suppress(Exception):
                        self.on_ready(int(msg.get("pid", 0)))
                elif msg.get("t") == "hang":
                    hang = channel.Hang.from_json(msg)
                    if hang is not None:
                        self._deliver_safely(hang)

    def _deliver_safely(self, hang: channel.Hang) -> None:
        try:
            self._deliver(hang)
        except Exception as exc:  # a bug here: end as a stuck test would, saying why
            self.note(f"hang-watch: the listener failed ({exc!r}): pytest ends")
            self._answer(hang, channel.EXIT)
            self.act(hang, channel.EXIT)

    def _deliver(self, hang: channel.Hang) -> None:
        ctl = self.ctl
        if hang.seq != ctl.seq:
            self._answer(hang, channel.MOVED)
            return
        if self.can_interrupt and ctl.interrupts.get(hang.seq, 0) < MAX_INTERRUPTS:
            ctl.acked.clear()
            ctl.pending = hang
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(threading.main_thread().ident or 0, SIGNAL)
            if ctl.acked.wait(ACK_S):
                ctl.interrupts[hang.seq] = ctl.interrupts.get(hang.seq, 0) + 1
                ctl.hangs += 1
                # the phase's threads, still deadlocked: the end must not wait for them
                ctl.left |= started_since(ctl.boot) - {os.getpid()}
                self._answer(hang, channel.INTERRUPTED)
                return
            ctl.pending = None
        if hang.seq != ctl.seq:  # it went on by itself meanwhile
            self._answer(hang, channel.MOVED)
            return
        ctl.hangs += 1
        try:
            how = self.stuck(hang)
        except Exception as exc:
            self.note(f"hang-watch: cannot start pytest again ({exc!r}): the session ends")
            how = channel.EXIT
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
