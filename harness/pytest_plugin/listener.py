"""The plugin's listener thread: it waits on the watcher's socket (its tid is left out of the
quiescence rule) and turns a verdict into the hung test's failure.

First it asks the main thread: a real-time signal (`SIGNAL`, not SIGUSR1/2, which test
suites use) through `pthread_kill`, whose handler raises `HangDetected` (a BaseException:
an `except Exception` in the test does not swallow it) where the main thread waits: a lock
acquire, a join, `Popen.wait`, a sleep. The handler acknowledges before it raises. If the
main thread was in the plugin's own code (a frame of this package on its stack), the hang
is the plugin's, not the test's: the handler raises `OwnStall` instead, which the plugin's
hook catches, turning hang-watch off for the rest of the session (the test goes on).

No acknowledgement within ACK_S means the main thread is in native code that does not return
to Python (a ctypes call into a deadlocked C function: the GIL is released there, so this
thread still runs; or a test replaced the handler). Then pytest starts again in this
process (`restart`), or, in an xdist worker, the worker ends itself and the controller
tells the crash with the verdict file.

A phase is interrupted again (up to MAX_INTERRUPTS) while each interrupt is acknowledged: a
test can swallow the first into a wait of its own (`with ThreadPoolExecutor() as ex:
ex.submit(deadlock).result()` joins the deadlocked worker in `__exit__`).

The watcher beats every few seconds; silence past STALL_S (or BUSY_S while it said it is
diagnosing) or the socket's end is the plugin's failure, said once (`note`): the session
goes on unwatched. Everything here goes through `pinned` and bounded waits on objects of
its own (a `_thread` lock, the socket), never a function a test may have replaced."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from harness.pytest_plugin import channel
from harness.pytest_plugin.pinned import P
from harness.pytest_plugin.threads import started_since

MAX_INTERRUPTS = 3  # acknowledged interrupts of one phase before it counts as stuck
READY_S = 30.0  # the watcher says "ready" once it runs: seconds, if it started at all
ACK_S = 2.0  # the main thread's handler runs at its next bytecode: milliseconds if at all
CLEANED_S = 5.0  # the watcher kills the hung test's processes, then says so
STALL_S = 10.0  # the watcher beats every BEAT_S (watcher.py): this much silence is a stall
BUSY_S = 120.0  # a diagnosis is bounded by the sampler's budgets, well within this
WAKE_S = 1.0  # the listener's longest wait on the socket
# a real-time signal no test suite has a reason to use (SIGUSR1/2 are theirs)
SIGNAL = signal.SIGRTMAX - 3
PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class HangDetected(BaseException):
    """The watcher's verdict on the running test, raised in the main thread."""


class OwnStall(BaseException):
    """The main thread was found stuck in the plugin's own code; its hook catches this."""


class Flag:
    """A one-way event on a `_thread` lock (no Python-level `threading` code in between)."""

    def __init__(self) -> None:
        self.lock = P.allocate_lock()
        self.lock.acquire()

    def set(self) -> None:
        if self.lock.locked():
            with contextlib.suppress(RuntimeError):  # another set got there first
                self.lock.release()

    def is_set(self) -> bool:
        return not self.lock.locked()

    def wait(self, timeout: float) -> bool:
        if self.lock.acquire(True, max(0.0, timeout)):
            self.lock.release()
            return True
        return False


@dataclass
class Control:
    """What the main thread and the listener share: the phase that runs (written by the
    main thread only) and the hang being delivered (written by the listener)."""

    seq: int = 0
    nodeid: str = ""
    when: str = "idle"
    boot: float = 0.0  # the phase's start, seconds since boot (`procstart.now`)
    pending: channel.Hang | None = None
    acked: Flag = field(default_factory=Flag)
    own: channel.Hang | None = None  # a hang found in the plugin's own frames
    interrupts: dict[int, int] = field(default_factory=dict)  # seq → acknowledged interrupts
    hangs: int = 0  # hangs answered in this process
    left: set[int] = field(default_factory=set)  # tids started in a phase that was interrupted
    off: str = ""  # why hang-watch stopped watching (said once in the summary)
    journal_said: bool = False  # the journal's failure was said
    handler: Any = None  # the handler installed (to tell whether a test replaced it)


def _in_plugin(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(PACKAGE):
            return True
        frame = frame.f_back
    return False


def install_handler(ctl: Control) -> object | None:
    """The interrupt's handler (main thread only); the previous one, or None if not
    possible."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        hang = ctl.pending
        if hang is None or hang.seq != ctl.seq:
            return  # the test moved on: this verdict is stale
        ctl.pending = None
        if _in_plugin(frame):
            ctl.own = hang
            ctl.acked.set()
            raise OwnStall(hang.message)
        ctl.acked.set()
        raise HangDetected(hang.message)

    try:
        previous = P.signal(SIGNAL, on_signal)
    except (ValueError, OSError, TypeError):  # not the main thread, or a test's signal()
        return None
    ctl.handler = on_signal
    return previous


class Listener(threading.Thread):
    """Reads the watcher's messages; `stuck` is called (in this thread) when the main thread
    cannot be interrupted and returns at once the answer it will act on (EXEC or EXIT);
    `act` runs after the watcher's cleanup. `on_ready` gets the watcher's pid; `note` says
    a line in the summary (once each)."""

    def __init__(
        self,
        ctl: Control,
        link: channel.Link,
        stuck: Callable[[channel.Hang], str],
        act: Callable[[channel.Hang, str], None],
        note: Callable[[str], None],
        on_ready: Callable[[int], None],
    ) -> None:
        super().__init__(name="hang-watch-listener", daemon=True)
        self.ctl = ctl
        self.link = link
        self.stuck = stuck
        self.act = act
        self.note = note
        self.on_ready = on_ready
        self.ready = Flag()  # this thread runs
        self.watching = Flag()  # the watcher said it is ready
        self.closing = False  # set by the plugin before it closes the socket
        self.tid = 0
        self.main_ident = threading.main_thread().ident or 0
        self.watcher_pid = 0

    def run(self) -> None:
        self.tid = P.get_native_id()
        self.ready.set()
        try:
            self._loop()
        except Exception as exc:  # a bug here: say it, and leave the session alone
            self._off(f"the listener failed ({exc!r})")
            self.link.close()  # the watcher must not take its silence for a held GIL

    def _off(self, why: str) -> None:
        if not self.ctl.off and not self.closing:
            self.ctl.off = why
            self.note(f"hang-watch: {why}; the tests after it were not watched")

    def _late(self) -> None:
        if not self.closing:
            self.note(
                f"hang-watch: the watcher did not start within {READY_S:g}s; the tests "
                "before it were not watched"
            )

    def _loop(self) -> None:
        started = last = P.monotonic()
        ready = busy = stalled = late = False
        while not self.closing:
            msgs = self.link.recv(WAKE_S)
            now = P.monotonic()
            if self.link.dead:
                if not self.closing:
                    self._off("the watcher ended or its socket was closed")
                return
            for msg in msgs:
                last = now
                what = msg.get("t")
                if what == "ready":
                    ready = True
                    self.watching.set()
                    self.watcher_pid = int(msg.get("pid", 0) or 0)
                    with contextlib.suppress(Exception):
                        self.on_ready(self.watcher_pid)
                elif what in ("beat", "busy"):
                    busy = what == "busy"
                elif what == "hang":
                    busy = False
                    hang = channel.Hang.from_json(msg)
                    if hang is not None:
                        self._deliver_safely(hang)
                        last = P.monotonic()
            if msgs and stalled:
                stalled = False
            if not ready and not late and now - started > READY_S:
                late = True
                self._late()
            if ready and now - last > (BUSY_S if busy else STALL_S) and not stalled:
                stalled = True
                self._off(f"the watcher stopped answering (silent {now - last:.0f}s)")

    def _deliver_safely(self, hang: channel.Hang) -> None:
        try:
            self._deliver(hang)
        except Exception as exc:  # a bug here: end as a stuck test would, saying why
            self.note(f"hang-watch: the listener failed ({exc!r}) on a hang")
            self._answer(hang, channel.EXIT)
            self.act(hang, channel.EXIT)

    def _deliver(self, hang: channel.Hang) -> None:
        ctl = self.ctl
        if hang.seq != ctl.seq or ctl.off:
            self._answer(hang, channel.MOVED)
            return
        ours = ctl.handler is not None and P.getsignal(SIGNAL) is ctl.handler
        if ours and ctl.interrupts.get(hang.seq, 0) < MAX_INTERRUPTS:
            ctl.acked = Flag()
            ctl.pending = hang
            with contextlib.suppress(OSError, ValueError):
                P.pthread_kill(self.main_ident, SIGNAL)
            if ctl.acked.wait(ACK_S):
                if ctl.own is not None:
                    self._answer(hang, channel.OWN)
                    return
                ctl.interrupts[hang.seq] = ctl.interrupts.get(hang.seq, 0) + 1
                ctl.hangs += 1
                # the phase's threads, still deadlocked: the end must not wait for them
                ctl.left |= started_since(ctl.boot) - {P.getpid()}
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
        if not self.link.send({"t": "answer", "seq": hang.seq, "how": how}):
            return
        end = P.monotonic() + CLEANED_S
        while not self.link.dead:
            left = end - P.monotonic()
            if left <= 0:
                return
            if any(m.get("t") == "cleaned" for m in self.link.recv(min(left, WAKE_S))):
                return
