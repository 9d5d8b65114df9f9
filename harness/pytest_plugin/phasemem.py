"""The test phase that runs, in memory shared by the plugin and its watcher (a memfd both
map): pytest's main thread writes it at each phase change, the watcher reads it at each step
of its loop.

A message would cost pytest's main thread a write to a pipe or socket at every phase: a
write that blocks when the watcher stalls, fails when it died, and goes through whatever a
test left in `os.write`. A store into shared memory does none of that: the main thread
never waits on the watcher, never calls a function a test can replace, and a watcher that
is gone costs nothing. The watcher misses phases shorter than its step (0.1 s), which have
nothing to watch; `seq` tells it a new phase began.

Layout: a header (`_HEAD`), then the infrastructure tids (pytest-timeout's Timer, then the
threads not started through `threading`), then the node id's bytes. A sequence lock
guards it: `gen` is odd while the writer is in the middle; a reader that sees it odd or
changed reads again (a bounded number of times, then keeps what it had)."""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from dataclasses import dataclass, field

SIZE = 16384
MAX_TIDS = 512
MAX_NODEID = SIZE - 64 - 4 * MAX_TIDS
WHEN = ("idle", "setup", "call", "teardown")
# gen, seq, when, n_timer, n_foreign, nodeid length, phase start (since boot), its epoch,
# the test's setup (since boot)
_HEAD = struct.Struct("<QQBHHHddd")
_TID = struct.Struct("<I")
_GEN = struct.Struct("<Q")
READ_TRIES = 50


@dataclass(frozen=True)
class PhaseState:
    seq: int = 0
    when: str = "idle"
    nodeid: str = ""
    boot: float = 0.0  # the phase's start, seconds since boot
    epoch: float = 0.0  # the same, epoch seconds
    test_boot: float = 0.0  # the test's setup, seconds since boot
    timer: tuple[int, ...] = field(default_factory=tuple)  # pytest-timeout's Timer threads
    foreign: tuple[int, ...] = field(default_factory=tuple)  # not started by `threading`


class PhaseMemory:
    """One mapping of the shared page; `create` makes the memfd, `attach` maps a passed one."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.gen = 0

    @staticmethod
    def create() -> PhaseMemory:
        fd = os.memfd_create("hang-watch-phase", os.MFD_CLOEXEC)
        os.ftruncate(fd, SIZE)
        return PhaseMemory(fd)

    def write(self, s: PhaseState) -> None:
        """The main thread's store (no system call, nothing a test can replace)."""
        m = self.map
        timer = s.timer[:MAX_TIDS]
        foreign = s.foreign[: MAX_TIDS - len(timer)]
        name = s.nodeid.encode("utf-8", "surrogateescape")[:MAX_NODEID]
        self.gen += 1  # odd: being written
        _GEN.pack_into(m, 0, self.gen)
        code = WHEN.index(s.when) if s.when in WHEN else 0
        head = (s.seq, code, len(timer), len(foreign), len(name), s.boot, s.epoch, s.test_boot)
        _HEAD.pack_into(m, 0, self.gen, *head)
        at = _HEAD.size
        for tid in (*timer, *foreign):
            _TID.pack_into(m, at, tid & 0xFFFFFFFF)
            at += _TID.size
        m[at : at + len(name)] = name
        self.gen += 1  # even: whole again
        _GEN.pack_into(m, 0, self.gen)

    def read(self) -> PhaseState | None:
        """The watcher's load; None when the writer kept it changing through every try."""
        m = self.map
        for _ in range(READ_TRIES):
            gen, seq, code, n_timer, n_foreign, n_name, boot, epoch, test_boot = _HEAD.unpack_from(
                m, 0
            )
            if gen % 2:
                continue
            n_timer = min(n_timer, MAX_TIDS)
            n_foreign = min(n_foreign, MAX_TIDS - n_timer)
            at = _HEAD.size
            tids = [_TID.unpack_from(m, at + 4 * i)[0] for i in range(n_timer + n_foreign)]
            at += 4 * (n_timer + n_foreign)
            name = bytes(m[at : at + min(n_name, MAX_NODEID)])
            if _GEN.unpack_from(m, 0)[0] != gen:
                continue
            return PhaseState(
                seq=seq,
                when=WHEN[code] if code < len(WHEN) else "idle",
                nodeid=name.decode("utf-8", "surrogateescape"),
                boot=boot,
                epoch=epoch,
                test_boot=test_boot,
                timer=tuple(tids[:n_timer]),
                foreign=tuple(tids[n_timer:]),
            )
        return None

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)
