"""The trainer's output at any rate, in bounded memory.

Three daemon threads, so that neither a slow parser, a slow terminal nor a descendant that
keeps the pipe open can ever block the harness or slow the program it watches:

- the pump (``OutputPump.run``) reads the pipe in chunks of up to 1 MiB (the pipe is widened
  to 1 MiB), writes them unchanged to output.log, counts their newlines and keeps the last
  chunks for the tail; no per-line work;
- the parser thread splits complete lines and feeds the dashboard parser. Output waits for it
  in a backlog of at most ``BACKLOG_BYTES`` (the oldest chunks are dropped first) and it never
  works on more than ``MAX_LAG_S`` of lines at its measured speed: when the output outruns it,
  it skips to the newest complete lines, so it always reaches the newest frame instead of
  falling behind. Then it samples: ``BEHIND_S`` of the newest lines, a rest, again, taking at
  most ``BEHIND_SHARE`` of a core. A skip is a cursor-home escape to the parser (every
  dashboard parser drops a cut frame on it); the lines it never saw are counted
  (``unparsed_lines``), and frames carry the output's own line numbers;
- the echo thread (``--tee``) writes the output to the terminal from its own backlog; when the
  terminal is slower than the program, lines are dropped and a marker says how many.

Frames: all of them up to ``FRAMES_CAP``; beyond it the first ``FRAMES_HEAD`` and the most
recent ``FRAMES_CAP - FRAMES_HEAD`` (``frames_total`` counts every frame parsed).
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from harness import dashboard

READ_BYTES = 1024 * 1024  # one os.read
PIPE_BYTES = 1024 * 1024  # the pipe's capacity, when the kernel allows it
MAX_LINE = 64 * 1024  # longer lines reach the parser in pieces of this (the log keeps every byte)
TAIL_LINES = 200
TAIL_BYTES = 1024 * 1024  # the tail is cut from about the last MiB of output
BACKLOG_BYTES = 2 * 1024 * 1024  # output waiting for the parser; older chunks are dropped
MAX_LAG_S = 1.0  # when further behind than this (at its measured speed), the parser skips
MIN_LINES = 1_000  # ahead to the newest lines: never fewer than this
BEHIND_S = 0.05  # behind, the parser samples: it parses this long of the newest lines,
BEHIND_SHARE = 0.25  # then rests, so that it takes this share of a core at most
BEHIND_MIN_LINES = 200  # (a dashboard box is about 25 lines)
ECHO_BYTES = 1024 * 1024  # output waiting for the terminal (--tee); older chunks are dropped
ECHO_DRAIN_S = 1.0  # at the end, how long the terminal may take to show what is left
FRAMES_CAP = 10_000
FRAMES_HEAD = 1_000
YIELD_LINES = 256  # the parser lets the pump run at least this often
RESET = "\x1b[H"  # cursor home: every dashboard parser drops a partial frame on it


@dataclass(frozen=True)
class _Chunk:
    offset: int  # bytes of output before this chunk
    lines_before: int  # newlines before this chunk
    newlines: int  # newlines in it
    after_newline: bool  # the chunk starts a line
    data: bytes


class _Backlog:
    """Chunks for one slow consumer, at most `limit` bytes: when it is full the oldest chunks
    are dropped, never the newest. The consumer sees the gap in the offsets."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._chunks: deque[_Chunk] = deque()
        self._size = 0
        self._closed = False

    def put(self, chunk: _Chunk) -> None:
        with self._cond:
            self._chunks.append(chunk)
            self._size += len(chunk.data)
            while self._size > self.limit and len(self._chunks) > 1:
                self._size -= len(self._chunks.popleft().data)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def take(self) -> list[_Chunk] | None:
        """Every chunk kept, oldest first, once there is one; None once closed and empty."""
        with self._cond:
            while not self._chunks and not self._closed:
                self._cond.wait()
            if not self._chunks:
                return None
            chunks = list(self._chunks)
            self._chunks.clear()
            self._size = 0
            return chunks


def _newest_lines(chunks: list[_Chunk], keep: int) -> list[_Chunk]:
    """The chunks cut to their last `keep` complete lines (and what follows them)."""
    kept = 0
    for i in range(len(chunks) - 1, -1, -1):
        c = chunks[i]
        if kept + c.newlines <= keep:
            kept += c.newlines
            continue
        need = keep - kept  # complete lines to keep from this chunk: cut after newline need+1
        cut = len(c.data.rsplit(b"\n", need + 1)[0]) + 1
        first = _Chunk(c.offset + cut, c.lines_before + c.newlines - need, need, True, c.data[cut:])
        return [first, *chunks[i + 1 :]]
    return chunks


class _Tail:
    """The last chunks of the output: enough for TAIL_LINES lines, about TAIL_BYTES at most."""

    def __init__(self) -> None:
        self._chunks: deque[_Chunk] = deque()
        self._size = 0
        self._newlines = 0

    def add(self, chunk: _Chunk) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk.data)
        self._newlines += chunk.newlines
        while len(self._chunks) > 1:
            first = self._chunks[0]
            rest_size = self._size - len(first.data)
            rest_newlines = self._newlines - first.newlines
            if rest_size < TAIL_BYTES and rest_newlines <= TAIL_LINES:
                break
            self._chunks.popleft()
            self._size, self._newlines = rest_size, rest_newlines

    def lines(self) -> list[str]:
        if not self._chunks:
            return []
        data = b"".join(c.data for c in self._chunks)
        parts = data.split(b"\n")
        if not parts[-1]:
            parts.pop()  # the output ended with a newline
        if not self._chunks[0].after_newline and len(parts) > TAIL_LINES:
            parts.pop(0)  # the start of that line is gone
        return [_text(p[-MAX_LINE:]) for p in parts[-TAIL_LINES:]]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


def _widen_pipe(fd: int) -> None:
    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setter is not None:
        with contextlib.suppress(OSError):  # not a pipe, or over the user's pipe quota
            fcntl.fcntl(fd, setter, PIPE_BYTES)


class OutputPump(threading.Thread):
    """Reads the command's merged stdout/stderr, writes every byte to the log, and feeds
    complete lines to the parser (in its own thread, skipping what it cannot keep up with).
    Runs in a daemon thread so a descendant that keeps the pipe open can never block the
    harness."""

    def __init__(self, fd: int, log: Path, parser: dashboard.Parser, echo: TextIO | None) -> None:
        super().__init__(daemon=True, name="harness-output")
        self.fd = fd
        self.log_path = log
        self.parser = parser
        self.echo = echo
        self.lock = threading.Lock()
        self.lines = 0  # exact: newlines, plus an unterminated last line
        self.bytes_read = 0
        self.parsed_lines = 0  # lines the parser saw whole
        self.frames_total = 0  # every frame parsed, kept or not
        self.echo_dropped_lines = 0
        self.error: str | None = None
        self._head: list[dashboard.MetricsFrame] = []
        self._recent: deque[dashboard.MetricsFrame] = deque(maxlen=FRAMES_CAP - FRAMES_HEAD)
        self._progress: list[tuple[float, int]] = []
        self._tail = _Tail()
        self._backlog = _Backlog(BACKLOG_BYTES)
        self._echo_backlog = _Backlog(ECHO_BYTES)
        self._line_cost = 20e-6  # the parser's seconds per line, measured as it goes

    # -- what the runner reads ------------------------------------------------------------

    @property
    def frames(self) -> list[dashboard.MetricsFrame]:
        """The frames kept: all up to FRAMES_CAP, then the first FRAMES_HEAD and the most
        recent ones."""
        with self.lock:
            return [*self._head, *self._recent]

    @property
    def tail(self) -> list[str]:
        """The last TAIL_LINES lines of the output (each cut to its last MAX_LINE bytes)."""
        with self.lock:
            return self._tail.lines()

    @property
    def unparsed_lines(self) -> int:
        """Lines the parser never saw whole because the output outran it (final once the
        pump has finished)."""
        with self.lock:
            return max(0, self.lines - self.parsed_lines)

    def take_progress(self) -> list[float]:
        """The time of each frame parsed since the last call."""
        with self.lock:
            taken, self._progress = self._progress, []
        return [t for t, n in taken for _ in range(n)]

    # -- the pump -------------------------------------------------------------------------

    def run(self) -> None:
        _widen_pipe(self.fd)
        parser_thread = threading.Thread(target=self._parse, daemon=True, name="harness-parse")
        parser_thread.start()
        echo_thread = None
        if self.echo is not None:
            echo_thread = threading.Thread(target=self._show, daemon=True, name="harness-echo")
            echo_thread.start()
        try:
            self._pump()
        finally:
            self._backlog.close()
            self._echo_backlog.close()
            parser_thread.join()
            if echo_thread is not None:
                echo_thread.join(ECHO_DRAIN_S)

    def _pump(self) -> None:
        after_newline = True
        with open(self.log_path, "ab", buffering=0) as log:
            writing = True
            while True:
                try:
                    data = os.read(self.fd, READ_BYTES)
                except OSError:
                    break
                if not data:
                    break
                if writing:
                    try:
                        _write_all(log.fileno(), data)
                    except OSError as exc:  # keep reading: a full disk must not block the run
                        self.error = f"output.log write failed: {exc}"
                        writing = False
                newlines = data.count(b"\n")
                chunk = _Chunk(self.bytes_read, self.lines, newlines, after_newline, data)
                after_newline = data.endswith(b"\n")
                with self.lock:
                    self.bytes_read += len(data)
                    self.lines += newlines
                    self._tail.add(chunk)
                self._backlog.put(chunk)
                if self.echo is not None:
                    self._echo_backlog.put(chunk)
        if not after_newline:
            with self.lock:
                self.lines += 1  # the unterminated last line

    # -- the parser thread ----------------------------------------------------------------

    def _parse(self) -> None:
        expected = 0  # the offset of the next byte the parser needs
        line_no = 0  # complete output lines before `pending`
        pending = b""  # the start of the current line
        skip_line = False  # the start of the current line was dropped
        while (chunks := self._backlog.take()) is not None:
            started = time.perf_counter()
            # behind: output was dropped, or what is waiting would take over MAX_LAG_S
            behind = chunks[0].offset != expected or sum(c.newlines for c in chunks) > self._keep()
            # then parse only the newest lines (chunks are contiguous: drops are oldest first)
            chunks = _newest_lines(chunks, self._keep(BEHIND_S) if behind else self._keep())
            first, last = chunks[0], chunks[-1]
            if first.offset != expected:  # output was dropped: the parser lost its place
                self._feed(RESET, line_no)
                pending, line_no, skip_line = b"", first.lines_before, not first.after_newline
            expected = last.offset + len(last.data)
            data = b"".join(c.data for c in chunks) if len(chunks) > 1 else first.data
            if skip_line:
                cut = data.find(b"\n")
                if cut < 0:
                    continue
                data, line_no, skip_line = data[cut + 1 :], line_no + 1, False
            line_no, pending = self._parse_lines(pending + data if pending else data, line_no)
            if behind:  # sampling the newest output: a share of a core is enough
                time.sleep((time.perf_counter() - started) * (1 / BEHIND_SHARE - 1))
        if pending and not skip_line:
            line_no += 1
            self._feed(_text(pending), line_no)
            with self.lock:
                self.parsed_lines += 1
        self._emit(self._guard(self.parser.finish), max(line_no, 1))

    def _keep(self, seconds: float | None = None) -> int:
        """How many lines the parser gets through in `seconds` (default MAX_LAG_S)."""
        if seconds is None:
            return max(MIN_LINES, int(MAX_LAG_S / self._line_cost))
        return max(BEHIND_MIN_LINES, int(seconds / self._line_cost))

    def _parse_lines(self, data: bytes, line_no: int) -> tuple[int, bytes]:
        """Feed the complete lines of `data`, skipping ahead when they would take longer than
        MAX_LAG_S; return the line count and the rest (an unterminated line)."""
        lines = data.split(b"\n")
        pending = lines.pop()
        n, i, parsed, t0 = len(lines), 0, 0, time.perf_counter()
        while i < n:
            raw = lines[i]
            if len(raw) > MAX_LINE:  # in pieces, as if it had come without its end
                raw = self._pieces(raw, line_no + i + 1)
            self._feed(_text(raw), line_no + i + 1)
            i += 1
            parsed += 1
            if parsed % YIELD_LINES == 0:
                time.sleep(0)  # let the pump take the GIL: it must never wait on the parser
                t0 = self._measure(t0, YIELD_LINES)
                if n - i > self._keep():  # too far behind: on to the newest lines
                    self._feed(RESET, line_no + i)
                    i = n - self._keep()
        if parsed % YIELD_LINES >= 16:
            self._measure(t0, parsed % YIELD_LINES)
        line_no += n
        if len(pending) > MAX_LINE:  # a line without end (yet): parse its head
            pending = self._pieces(pending, line_no + 1)
        with self.lock:
            self.parsed_lines += parsed
        return line_no, pending

    def _pieces(self, raw: bytes, line_no: int) -> bytes:
        """Feed a long line's MAX_LINE pieces while more than MAX_LINE is left; the rest."""
        start = 0
        while len(raw) - start > MAX_LINE:
            self._feed(_text(raw[start : start + MAX_LINE]), line_no)
            start += MAX_LINE
        return raw[start:]

    def _measure(self, since: float, lines: int) -> float:
        now = time.perf_counter()
        self._line_cost += ((now - since) / lines - self._line_cost) / 4
        return now

    def _feed(self, text: str, line_no: int) -> None:
        self._emit(self._guard(lambda: self.parser.feed(text)), line_no)

    def _guard(
        self, fn: Callable[[], list[dashboard.MetricsFrame]]
    ) -> list[dashboard.MetricsFrame]:
        try:
            return fn()
        except Exception as exc:  # a parser bug must not kill the watch; record it
            self.error = f"parser {self.parser.name} failed: {exc!r}"
            return []

    def _emit(self, frames: list[dashboard.MetricsFrame], line_no: int) -> None:
        if not frames:
            return
        now = time.monotonic()
        with self.lock:
            for frame in frames:
                frame.line_no = line_no  # the output's line, whatever the parser skipped
                if len(self._head) < FRAMES_HEAD:
                    self._head.append(frame)
                else:
                    self._recent.append(frame)
            self.frames_total += len(frames)
            if self._progress and now - self._progress[-1][0] < 0.01:
                t, n = self._progress[-1]
                self._progress[-1] = (t, n + len(frames))
            else:
                self._progress.append((now, len(frames)))

    # -- the echo thread (--tee) ----------------------------------------------------------

    def _show(self) -> None:
        assert self.echo is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        expected = lines_seen = 0
        ended_line = True
        # under GitHub Actions the runner reads workflow commands from stderr too: the
        # trainer's own lines ("::error::…", "::add-mask::…") must stay text, so the echo is
        # wrapped in ::stop-commands:: with a token the trainer cannot guess
        resume = ""
        if os.environ.get("GITHUB_ACTIONS") == "true":
            token = secrets.token_hex(16)
            resume = f"::{token}::\n"
            if not self._echo_write(f"::stop-commands::{token}\n"):
                return
        while (chunks := self._echo_backlog.take()) is not None:
            parts: list[str] = []
            for chunk in chunks:
                if chunk.offset != expected:
                    dropped = chunk.lines_before - lines_seen
                    self.echo_dropped_lines += dropped
                    decoder.reset()
                    parts.append(
                        f"\n[harness: {dropped} lines not shown: the terminal is slower]\n"
                    )
                expected = chunk.offset + len(chunk.data)
                lines_seen = chunk.lines_before + chunk.newlines
                parts.append(decoder.decode(chunk.data))
            ended_line = chunks[-1].data.endswith(b"\n")
            if not self._echo_write("".join(parts)):
                return  # the terminal is gone: nothing to resume on it either
        self._echo_write(decoder.decode(b"", final=True) + ("" if ended_line else "\n") + resume)

    def _echo_write(self, text: str) -> bool:
        """Show text on the terminal; False once the terminal is gone (the pump goes on)."""
        assert self.echo is not None
        try:
            self.echo.write(text)
            self.echo.flush()
        except (OSError, ValueError):
            return False
        return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
