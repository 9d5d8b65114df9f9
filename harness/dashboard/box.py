"""The box parsers: collect the rows of one dashboard box and read them with the layout of
the version its header names, so either parser reads either version's box. ``puffer5`` also
reads the 5.0 one-liner printed outside any box."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.dashboard.puffer3 import interpret3
from harness.dashboard.puffer5 import interpret5, oneline5
from harness.dashboard.text import (
    MAX_FRAME_LINES,
    MAX_LINE_CHARS,
    MAX_ROW_CHARS,
    MetricsFrame,
    Sink,
    clean_line,
    is_rule,
    segments,
)

PROGRESS_KEYS = ("agent_steps", "epoch", "SPS", "uptime")


def _version_of(rows: Sequence[str]) -> str:
    for row in rows[:4]:
        m = re.search(r"PufferLib\s+(\d)", row, re.ASCII)
        if m:
            return m[1]
    return ""


class _BoxParser:
    """Collects the rows of a dashboard box (╭ … ╰) and reads them when it closes."""

    name = "box"

    def __init__(self) -> None:
        self._rows: list[str] = []
        self._in_box = False
        self._line_no = 0
        self._count = 0

    def feed(self, line: str) -> list[MetricsFrame]:
        self._line_no += 1
        frames: list[MetricsFrame] = []
        for new_screen, raw in segments(line[:MAX_LINE_CHARS]):
            if new_screen:  # the screen is redrawn from the top: a cut frame is lost
                self._reset()
            frames.extend(self._clean_line(clean_line(raw)))
        return frames

    def finish(self) -> list[MetricsFrame]:
        """A cut last box is reported (complete=False) only if it already shows progress."""
        frame = self._frame(complete=False) if self._in_box else None
        self._reset()
        usable = frame is not None and any(k in frame.metrics for k in PROGRESS_KEYS)
        return [frame] if frame is not None and usable else []

    def _reset(self) -> None:
        self._rows, self._in_box = [], False

    def _clean_line(self, s: str) -> list[MetricsFrame]:
        if is_rule(s, "╭", "╮"):
            self._rows, self._in_box = [], True
            return []
        if not self._in_box:
            return self._outside(s)
        if is_rule(s, "╰", "╯"):
            frame = self._frame(complete=True)
            self._reset()
            return [frame] if frame is not None else []
        self._rows.append(s[:MAX_ROW_CHARS])
        if len(self._rows) > MAX_FRAME_LINES:
            self._reset()
        return []

    def _outside(self, s: str) -> list[MetricsFrame]:
        return []

    def _frame(self, complete: bool) -> MetricsFrame | None:
        version = _version_of(self._rows)
        if not version:  # some other box (a traceback panel, a table): not a dashboard
            return None
        reader = interpret3 if version == "3" else interpret5
        return self._emit(reader(self._rows), complete)

    def _emit(self, sink: Sink, complete: bool) -> MetricsFrame:
        frame = MetricsFrame(self._count, sink.metrics, sink.text, self._line_no, complete)
        self._count += 1
        return frame


class Puffer5Parser(_BoxParser):
    name = "puffer5"

    def _outside(self, s: str) -> list[MetricsFrame]:
        sink = oneline5(s)
        return [self._emit(sink, True)] if sink is not None and sink.metrics else []


class Puffer3Parser(_BoxParser):
    name = "puffer3"
