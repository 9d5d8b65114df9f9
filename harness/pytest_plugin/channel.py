"""What the plugin and its watcher say to each other: one JSON object a line over two pipes
(plugin → watcher: hello, each test phase, idle, the answer to a hang; watcher → plugin:
the hang, the cleanup done), and the verdict file a hang leaves beside its report folder
(the xdist controller reads it for a worker that was ended: `verdict_path`).

Both ends read with a bounded buffer and drop a line that is not a JSON object: a message
never raises into pytest."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.files import atomic_write

HIDDEN_DIR = ".hang-watch"  # under --hang-report-dir: verdict files, the watcher's log
MAX_LINE = 1 << 20  # a longer line is garbage, dropped

# the phases a test runs in; "idle" is between phases and between tests
PHASES = ("setup", "call", "teardown")

# how a hang was answered (plugin → watcher)
INTERRUPTED = "interrupted"  # the main thread took the exception: the test fails as usual
EXEC = "exec"  # main thread stuck in native code: pytest starts again in this process
EXIT = "exit"  # main thread stuck, an xdist worker: it ends itself, xdist replaces it
MOVED = "moved"  # the test was over by the time the verdict came: nothing to fail


@dataclass(frozen=True)
class Hang:
    """A verdict on one test phase, as the test's failure tells it."""

    seq: int  # the phase message it is about
    nodeid: str
    when: str
    trigger: str  # "quiescent" or "wall"
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
            if self.trigger == "quiescent"
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
                trigger=str(data["trigger"]),
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
        with open(verdict_path(report_dir, nodeid), "rb") as f:
            data = json.loads(f.read(MAX_LINE))
    except (OSError, ValueError):
        return None
    hang = Hang.from_json(data) if isinstance(data, dict) else None
    if hang is None or hang.nodeid != nodeid or hang.time < since:
        return None
    return hang


def send(fd: int, message: dict[str, Any]) -> bool:
    """One message; False when the other end is gone (the caller stops sending)."""
    data = (json.dumps(message) + "\n").encode()
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:
        return False
    return True


class Lines:
    """JSON objects from a pipe, a line each; `read` blocks for the next chunk and returns
    what it completed (an empty list at end of file sets `eof`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def read(self) -> list[dict[str, Any]]:
        try:
            chunk = os.read(self.fd, 65536)
        except InterruptedError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            return []
        self.buf += chunk
        out: list[dict[str, Any]] = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
        if len(self.buf) > MAX_LINE:
            self.buf = b""
        return out
