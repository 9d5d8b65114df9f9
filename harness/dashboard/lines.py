"""The ``lines`` parser: every non-empty line is a frame without metrics (generic
progress)."""

from __future__ import annotations

from harness.dashboard.text import MAX_LINE_CHARS, MetricsFrame, clean_line


class LinesParser:
    """Every non-empty line is progress; nothing else is known about the format."""

    name = "lines"

    def __init__(self) -> None:
        self._line_no = 0
        self._count = 0

    def feed(self, line: str) -> list[MetricsFrame]:
        self._line_no += 1
        if not clean_line(line[:MAX_LINE_CHARS]):
            return []
        self._count += 1
        return [MetricsFrame(self._count - 1, {}, {}, self._line_no)]

    def finish(self) -> list[MetricsFrame]:
        return []
