"""The trainer's output: every byte to output.log, complete lines to the dashboard parser,
a bounded tail in memory. Runs in a daemon thread so that a descendant that keeps the pipe
open can never block the harness."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from harness import dashboard

MAX_LINE = 64 * 1024  # longer lines are cut before parsing (the log keeps every byte)
TAIL_LINES = 200


class OutputPump(threading.Thread):
    """Reads the command's merged stdout/stderr, writes every byte to the log, and feeds
    complete lines to the parser. Runs in a daemon thread so a descendant that keeps the
    pipe open can never block the harness."""

    def __init__(self, fd: int, log: Path, parser: dashboard.Parser, echo: TextIO | None) -> None:
        super().__init__(daemon=True, name="harness-output")
        self.fd = fd
        self.log_path = log
        self.parser = parser
        self.echo = echo
        self.lock = threading.Lock()
        self.frames: list[dashboard.MetricsFrame] = []
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.lines = 0
        self.progress_times: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        pending = b""
        with open(self.log_path, "ab") as log:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                log.write(chunk)
                log.flush()
                pending = self._consume(pending + chunk)
            if pending:
                self._line(pending)
            self._emit(self._guard(self.parser.finish))

    def _consume(self, data: bytes) -> bytes:
        *lines, rest = data.split(b"\n")
        for raw in lines:
            self._line(raw)
        while len(rest) > MAX_LINE:  # a line without end: parse its head, keep going
            self._line(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        return rest

    def _line(self, raw: bytes) -> None:
        text = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")
        if self.echo is not None:
            with contextlib.suppress(OSError, ValueError):
                self.echo.write(text + "\n")
                self.echo.flush()
        with self.lock:
            self.lines += 1
            self.tail.append(text)
        self._emit(self._guard(lambda: self.parser.feed(text)))

    def _guard(
        self, fn: Callable[[], list[dashboard.MetricsFrame]]
    ) -> list[dashboard.MetricsFrame]:
        try:
            return fn()
        except Exception as exc:  # a parser bug must not kill the watch; record it
            self.error = f"parser {self.parser.name} failed: {exc!r}"
            return []

    def _emit(self, frames: list[dashboard.MetricsFrame]) -> None:
        if not frames:
            return
        now = time.monotonic()
        with self.lock:
            self.frames.extend(frames)
            self.progress_times.extend(now for _ in frames)

    def take_progress(self) -> list[float]:
        with self.lock:
            times, self.progress_times = self.progress_times, []
            return times
