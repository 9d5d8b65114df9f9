"""What the plugin and its watcher say to each other over a socket pair (`Link`: plugin →
watcher: hello, the answer to a hang; watcher → plugin: ready, a heartbeat, busy while it
diagnoses, the hang, the cleanup done), and the verdict file a hang leaves beside its report
folder (the xdist controller reads it for a worker that was ended: `verdict_path`). The test
phase itself goes through shared memory (`phasemem`): pytest's main thread sends nothing.

Both ends read with a bounded buffer and drop a message that is not a JSON object: a
message never raises into pytest."""

from __future__ import annotations

import _socket
import contextlib
import hashlib
import json
import select
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.files import atomic_write
from harness.pytest_plugin.pinned import P
from harness.vocab import Trigger

RESUME_ENV = "HANG_WATCH_RESUME"  # the journal a session started again reads (resume)
HIDDEN_DIR = ".hang-watch"  # under --hang-report-dir: verdict files, the watcher's log
MAX_LINE = 1 << 20  # a longer verdict file is garbage
MAX_PACKET = 1 << 16  # one message; the watcher keeps its texts shorter
SEND_S = 5.0  # a send waits this long for room in the socket, then the link is dead
SEND_TRIES = 16  # and tries this often (each a wait for room, or an interrupted send)
RECV_BATCH = 64  # messages taken at one wake
_FLAGS = _socket.MSG_NOSIGNAL | _socket.MSG_DONTWAIT

# the phases a test runs in; "idle" is between phases and between tests
PHASES = ("setup", "call", "teardown")

# how a hang was answered (plugin → watcher)
INTERRUPTED = "interrupted"  # the main thread took the exception: the test fails as usual
EXEC = "exec"  # main thread stuck in native code: pytest starts again in this process
EXIT = "exit"  # main thread stuck, an xdist worker: it ends itself, xdist replaces it
MOVED = "moved"  # the test was over by the time the verdict came: nothing to fail
OWN = "own"  # the main thread was in the plugin's own code: its fault, not the test's
# no answer (the GIL is held): the watcher made pytest start again through gdb, or, where
# it could not, ended it
EXEC_TRACED = "exec-traced"
KILLED = "killed"


@dataclass(frozen=True)
class Hang:
    """A verdict on one test phase, as the test's failure tells it."""

    seq: int  # the phase message it is about
    nodeid: str
    when: str
    trigger: Trigger  # quiescent or wall
    after_s: float  # from the phase's start to the trigger
    kind: str
    summary: str
    cause_id: str
    cause_title: str
    report: str  # the report folder
    time: float  # epoch seconds of the verdict
    answer: str = ""  # filled in once the plugin answered (or "killed": no answer)
    killed: list[int] = field(default_factory=list)

    @property
    def message(self) -> str:
        cause = f"{self.cause_id}: {self.cause_title}" if self.cause_id else "none found"
        how = (
            f"quiescent {self.after_s:.1f}s into {self.when}"
            if self.trigger == Trigger.QUIESCENT
            else f"still in {self.when} after {self.after_s:.0f}s (--hang-timeout)"
        )
        return (
            f"hang-watch: {self.nodeid} hung ({how}): {self.summary}\n"
            f"  top cause: {cause}\n"
            f"  report: {self.report}"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Hang | None:
        try:
            return Hang(
                seq=int(data["seq"]),
                nodeid=str(data["nodeid"]),
                when=str(data["when"]),
                trigger=Trigger(data["trigger"]),
                after_s=float(data["after_s"]),
                kind=str(data["kind"]),
                summary=str(data["summary"]),
                cause_id=str(data["cause_id"]),
                cause_title=str(data["cause_title"]),
                report=str(data["report"]),
                time=float(data["time"]),
                answer=str(data.get("answer", "")),
                killed=[int(p) for p in data.get("killed", [])],
            )
        except (KeyError, TypeError, ValueError):
            return None


def verdict_path(report_dir: Path, nodeid: str) -> Path:
    """Where the verdict on `nodeid` is kept (the latest one): a name from a hash, since a
    node id holds any character."""
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return report_dir / HIDDEN_DIR / f"{digest}.json"


def write_verdict(report_dir: Path, hang: Hang) -> None:
    path = verdict_path(report_dir, hang.nodeid)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(hang.to_json(), indent=2) + "\n"
        atomic_write(path, text)
        atomic_write(Path(hang.report) / "hang.json", text)


def read_verdict(report_dir: Path, nodeid: str, since: float) -> Hang | None:
    """The verdict on `nodeid` made after `since` (epoch seconds), if any."""
    try:
        with P.open(verdict_path(report_dir, nodeid), "rb") as f:
            data = json.loads(f.read(MAX_LINE))
    except (OSError, ValueError):
        return None
    hang = Hang.from_json(data) if isinstance(data, dict) else None
    if hang is None or hang.nodeid != nodeid or hang.time < since:
        return None
    return hang


class Link:
    """One end of the plugin ↔ watcher socket (AF_UNIX, SOCK_SEQPACKET: each message one
    packet, whole or not at all, and end of file when the other end closes). Every call is
    bounded: a send waits at most `timeout` for room, a receive at most its timeout, and a
    failure (a closed peer, a descriptor a test closed) marks the link `dead` instead of
    raising. No SIGPIPE: MSG_NOSIGNAL, whatever a test did to SIGPIPE's disposition."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        sock.setblocking(False)
        self.fd = sock.fileno()
        self.poller = P.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.dead = False

    @staticmethod
    def pair() -> tuple[Link, _socket.socket]:
        """This side's link and the other end's socket (for the watcher)."""
        mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        return Link(mine), theirs

    @staticmethod
    def from_fd(fd: int) -> Link:
        return Link(_socket.socket(fileno=fd))

    def send(self, message: dict[str, Any], timeout: float = SEND_S) -> bool:
        """One message; False (and `dead`) when the other end is gone or takes nothing
        within `timeout`."""
        if self.dead:
            return False
        data = P.dumps(message, default=str).encode()
        if len(data) > MAX_PACKET:
            return False
        end = P.monotonic() + timeout
        for _ in range(SEND_TRIES):
            try:
                self.sock.send(data, _FLAGS)
                return True
            except (BlockingIOError, InterruptedError):
                left = end - P.monotonic()
                if left <= 0:
                    break
                out = P.poll()
                out.register(self.fd, select.POLLOUT)
                try:
                    out.poll(max(1, int(left * 1000)))
                except OSError:
                    break
            except OSError:
                break
        self.dead = True
        return False

    def recv(self, timeout: float) -> list[dict[str, Any]]:
        """The messages that came within `timeout` (all those waiting, at most a few): an
        empty list at end of file or on an error sets `dead`."""
        if self.dead:
            return []
        try:
            ready = self.poller.poll(max(0, int(timeout * 1000)))
        except InterruptedError:
            return []
        except OSError:
            self.dead = True
            return []
        if not ready:
            return []
        out: list[dict[str, Any]] = []
        for _ in range(RECV_BATCH):
            try:
                data = self.sock.recv(MAX_PACKET, _socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.dead = True
                break
            if not data:
                self.dead = True  # the other end closed
                break
            try:
                obj = P.loads(data)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    def close(self) -> None:
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()
