"""The PufferLib 3.0 rich dashboard: a rounded box per epoch whose first line carries the
cursor-home prefix ``ESC[0;0H``; a header of utilization cells, a Summary | Performance |
Losses block and two User Stats tables."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from harness.dashboard.text import (
    MAX_ROW_CHARS,
    SUMMARY_KEYS,
    Sink,
    box_inner,
    cells_at,
    label_key,
    put_summary,
    put_timing,
    put_version,
    resolve_label,
    slug,
)
from harness.dashboard.values import parse_number, parse_value

PERF3 = {  # 3.0 performance column: keys are 3.0's own profile names
    ("", "Evaluate"): "perf/eval",
    ("eval", "Forward"): "perf/eval_forward",
    ("eval", "Env"): "perf/env",
    ("eval", "Copy"): "perf/eval_copy",
    ("eval", "Misc"): "perf/eval_misc",
    ("", "Train"): "perf/train",
    ("train", "Forward"): "perf/train_forward",
    ("train", "Learn"): "perf/learn",
    ("train", "Copy"): "perf/train_copy",
    ("train", "Misc"): "perf/train_misc",
}
LOSSES3 = (
    "policy_loss",
    "value_loss",
    "entropy",
    "old_approx_kl",
    "approx_kl",
    "clipfrac",
    "importance",
    "explained_variance",
)
HEADER3_KEYS = {
    "CPU": "util/cpu_percent",
    "GPU": "util/gpu_percent",
    "DRAM": "util/dram_percent",
    "VRAM": "util/vram_percent",
}


def _find_cell(lines: Sequence[str], word: str) -> int | None:
    for i, line in enumerate(lines):
        if any(text == word for _, text in cells_at(line)):
            return i
    return None


def _header3(lines: Sequence[str], sink: Sink) -> None:
    """The "CPU: 45.2%" cells. At 80 columns rich wraps a value onto the next line under its
    label, so a label without a value takes the cells below it (columns ±2: the 🐡 is one
    character but two columns wide)."""
    if not lines:
        return
    put_version(lines[0], sink)
    cells = cells_at(lines[0])
    for n, (start, text) in enumerate(cells):
        m = re.fullmatch(r"([A-Za-z]+):\s*(.*)", text)
        if m:
            end = cells[n + 1][0] if n + 1 < len(cells) else MAX_ROW_CHARS
            value = m[2] or _below(lines[1:], start - 2, end - 2)
            sink.num(HEADER3_KEYS.get(m[1], f"util/{slug(m[1])}"), parse_number(value))


def _below(lines: Sequence[str], lo: int, hi: int) -> str:
    return " ".join(t for line in lines for p, t in cells_at(line) if lo <= p < hi)


class _Monitor3:
    """The Summary | Performance | Losses block, cut into columns at the header's offsets."""

    def __init__(self, sink: Sink, head: str) -> None:
        self.sink = sink
        self.parent = "eval"
        self.last_text = ""
        cells = cells_at(head)
        starts = {text: pos for pos, text in reversed(cells)}
        self.s0 = starts.get("Summary", 0)
        self.l0 = starts.get("Losses")
        after_value = [pos for pos, text in cells if pos > self.s0 and text != "Value"]
        first = after_value[0] if after_value else None
        self.p0 = first if first is not None and first != self.l0 else None

    def line(self, line: str, first: bool) -> None:
        p0 = self.p0 if self.p0 is not None else self.l0
        s_part = line[self.s0 : p0] if p0 is not None else line[self.s0 :]
        p_part = line[self.p0 : self.l0] if self.p0 is not None else ""
        l_part = line[self.l0 :] if self.l0 is not None else ""
        if not first:  # the first line holds the Summary/Losses titles, not values
            self._summary(s_part)
            self._loss(l_part)
        self._perf(p_part)

    def _summary(self, part: str) -> None:
        cells = cells_at(part)
        if not cells:
            return
        if cells[0][0] > 1:  # no label: rich wrapped the previous text value
            if self.last_text in self.sink.text:
                joined = " ".join([self.sink.text[self.last_text], *(t for _, t in cells)])
                self.sink.txt(self.last_text, joined)
            return
        label = resolve_label(cells[0][1], SUMMARY_KEYS)
        self.last_text = put_summary(self.sink, label, cells[1][1] if len(cells) > 1 else "")

    def _perf(self, part: str) -> None:
        cells = cells_at(part)
        if not cells:
            return
        label = resolve_label(cells[0][1], [lab for par, lab in PERF3 if par in ("", self.parent)])
        value = " ".join(t for _, t in cells[1:])
        self.parent = put_timing(self.sink, PERF3, self.parent, label, value)

    def _loss(self, part: str) -> None:
        cells = cells_at(part)
        if len(cells) >= 2:
            name = resolve_label(cells[0][1], LOSSES3)
            self.sink.num(f"loss/{label_key(name)}", parse_value(cells[1][1]))


def _user3(lines: Sequence[str], sink: Sink) -> None:
    """Two "User Stats | Value" tables side by side → env/<name>."""
    starts = [pos for pos, text in cells_at(lines[0]) if text == "User Stats"]
    bounds = [*starts, None] if starts else [0, None]
    for line in lines[1:]:
        for a, b in itertools.pairwise(bounds):
            cells = [t for _, t in cells_at(line[a:b])]
            for label, value in zip(cells[::2], cells[1::2], strict=False):
                sink.put(f"env/{label_key(label)}", value)


def interpret3(rows: Sequence[str]) -> Sink:
    sink = Sink()
    lines = [c for c in (box_inner(r) for r in rows) if c is not None]
    i_sum = _find_cell(lines, "Summary")
    i_user = _find_cell(lines, "User Stats")
    ends = [i for i in (i_sum, i_user) if i is not None]
    _header3(lines[: min(ends, default=len(lines))], sink)
    if i_sum is not None:
        stop = i_user if i_user is not None and i_user > i_sum else len(lines)
        monitor = _Monitor3(sink, lines[i_sum])
        for n, line in enumerate(lines[i_sum:stop]):
            monitor.line(line, n == 0)
    if i_user is not None:
        _user3(lines[i_user:], sink)
    return sink
