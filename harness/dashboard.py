"""Turn a trainer's terminal output into metrics frames.

Parsers (``PARSERS``), fed one output line at a time:

- ``puffer5``: the PufferLib 5.0 dashboard, an 80-column Unicode box (``╭─╮ │ ╰─╯``) with the
  header ``PufferLib 5.0`` and a 🐡, printed once per logged epoch, and its one-line compact form
  (``PufferLib 5.0  env=…  steps=…``) used on small terminals. Our replica prints the same box and
  may add rows and sections. A frame is complete when its box closes.
- ``puffer3``: the PufferLib 3.0 rich dashboard, a rounded box per epoch whose first line carries
  the cursor-home prefix ``ESC[0;0H``.
- ``lines``: every non-empty line is a frame without metrics (generic progress).

The layouts, the label → key tables and the log file formats are in ``docs/formats.md``.

Keys are the trainer's own log keys (``SPS``, ``agent_steps``, ``uptime``, ``epoch``,
``env/<name>``, ``loss/<name>``, ``perf/<name>``, ``util/<name>``), plus what only the dashboard
shows: ``params``, ``to_go`` (5.0) / ``remaining`` (3.0) in seconds, ``perf/<name>_pct`` (the
share column) and, for 3.0, ``util/cpu_percent``, ``util/dram_percent``, ``util/vram_percent``.
Text values (the env name, 3.0's "A hair past a freckle") go to ``MetricsFrame.text``.

Value rules (``parse_value``):

- plain numbers, ``nan``/``-nan``/``inf`` as Python floats;
- count suffixes ``K``/``M``/``B``/``T`` multiply by 1e3/1e6/1e9/1e12 (``1.2K`` → 1200.0); the
  trainers print one decimal, so these values are approximate;
- ``12%`` → 12.0 (percent units, not a fraction), ``3.4G`` → 3.4 (GB, the number as shown);
- durations: ``<n>d <n>h <n>m <n>s <n>ms`` parts in decreasing order, spaces optional, to
  seconds: ``45s`` → 45.0, ``1m 30s`` → 90.0, ``2h 3m`` → 7380.0, ``12s 345ms`` → 12.345,
  ``1d 0h 0m 5s`` → 86405.0. A trailing group of 1-3 bare digits after ``s`` is the head of a
  zero-padded millisecond field cut by a narrow cell: ``1s 234`` → 1.234, ``12s 34`` → 12.34;
- a value that rich cut with ``…`` is kept only when the cut fell after the decimal point
  (``1543.2…`` → 1543.2);
- in timing cells (5.0's are 6 columns wide) a duration that does not end in seconds was cut
  (``0d 0h`` from ``0d 0h 0m 3s``) and is dropped rather than reported as a wrong number.

Robustness: ANSI escapes are stripped anywhere, a cursor-home escape starts a new frame (the
old partial one is dropped), lines are cut to 64 KiB before parsing, a box longer than 500 rows
is discarded, a frame holds at most 1000 keys; no input raises.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

MAX_LINE_CHARS = 64 * 1024  # lines are cut to this before parsing
MAX_FRAME_LINES = 500  # a "box" longer than this is not a dashboard: discard it
MAX_ROW_CHARS = 4096  # rows of a box are cut to this when kept (real rows are < 300)
MAX_KEYS = 1000  # per frame, so a hostile box cannot grow a frame without bound
MAX_TEXT_CHARS = 200  # per text value
MAX_LOG_BYTES = 16 * 1024 * 1024  # per end-of-run log file read

SUMMARY_KEYS = {  # first panel column (5.0 and 3.0) → key; "Env" is text
    "Env": "env",
    "Params": "params",
    "Steps": "agent_steps",
    "SPS": "SPS",
    "Epoch": "epoch",
    "Uptime": "uptime",
    "To go": "to_go",
    "Remaining": "remaining",
}
PERF5 = {  # 5.0 timing column, (parent, label) → key; parents have parent ""
    ("", "Evaluate"): "perf/rollout",
    ("eval", "Model"): "perf/eval_model",
    ("eval", "Env"): "perf/eval_env",
    ("eval", "Copy"): "perf/eval_copy",
    ("", "Train"): "perf/train",
    ("train", "Model"): "perf/train_model",
    ("train", "Misc"): "perf/train_misc",
}
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
PERF_PARENTS = {"Evaluate": "eval", "Train": "train"}
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
HEADER5_KEYS = {"GPU": "util/gpu_percent", "RAM": "util/cpu_mem_gb"}  # VRAM is split in two
HEADER3_KEYS = {
    "CPU": "util/cpu_percent",
    "GPU": "util/gpu_percent",
    "DRAM": "util/dram_percent",
    "VRAM": "util/vram_percent",
}
ONELINE_KEYS = {"env": "env", "steps": "agent_steps", "SPS": "SPS", "score": "env/score"}
PROGRESS_KEYS = ("agent_steps", "epoch", "SPS", "uptime")
ENV_TITLES = {"env", "environment", "user_stats", "stats"}  # titled sections that mean env/


@dataclass
class MetricsFrame:
    index: int  # 0-based frame number in the stream
    metrics: dict[str, float]  # canonical log keys → values
    text: dict[str, str]  # keys whose shown value is not numeric (e.g. "env")
    line_no: int  # 1-based output line on which the frame ended
    complete: bool = True  # False only for a partial box flushed by finish()


class Parser(Protocol):
    name: str

    def feed(self, line: str) -> list[MetricsFrame]: ...

    def finish(self) -> list[MetricsFrame]: ...


# ---------------------------------------------------------------------------------------------
# values

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER_RE = re.compile(rf"({_NUM})\s?([KMBT%G]?)", re.ASCII)
_SPECIAL_RE = re.compile(r"([-+]?(?:nan|inf(?:inity)?))[%G]?", re.ASCII | re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "%": 1.0, "G": 1.0}
_EXPONENT = {"K": "e3", "M": "e6", "B": "e9", "T": "e12"}
_DUR_PART_RE = re.compile(r"\s*(\d+(?:\.\d+)?)(ms|d|h|m|s)(?![A-Za-z])", re.ASCII)
_DUR_TOKEN_RE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|d|h|m|s))+", re.ASCII)
_MS_HEAD_RE = re.compile(r"[0-9]{1,3}")
_UNIT_MS = {"d": 86_400_000.0, "h": 3_600_000.0, "m": 60_000.0, "s": 1000.0, "ms": 1.0}
_UNIT_RANK = {"d": 0, "h": 1, "m": 2, "s": 3, "ms": 4}
_TEXT_VALUES = {"n/a", "N/A", "-", "—", "?"}


def parse_number(s: str) -> float | None:
    """A number with an optional K/M/B/T, % or G suffix, or nan/inf; None otherwise."""
    s = s.strip()
    m = _NUMBER_RE.fullmatch(s)
    if m:  # scale through the exponent so "262.1K" is 262100.0 exactly, not 262100.00000000003
        exp = _EXPONENT.get(m[2], "")
        return float(m[1] + exp) if exp and "e" not in m[1].lower() else float(m[1]) * _SCALE[m[2]]
    m = _SPECIAL_RE.fullmatch(s)
    return float(m[1]) if m else None


def _duration(s: str) -> tuple[float, str] | None:
    """Seconds and the smallest unit seen, or None when s is not a duration."""
    ms, last, pos, s = 0.0, "", 0, s.strip()  # summed in ms so "3s 405ms" is exactly 3.405
    while pos < len(s):
        m = _DUR_PART_RE.match(s, pos)
        if not m or (last and _UNIT_RANK[m[2]] <= _UNIT_RANK[last]):
            break
        ms += float(m[1]) * _UNIT_MS[m[2]]
        last, pos = m[2], m.end()
    rest = s[pos:].strip()
    if not last:
        return None
    if not rest:
        return ms / 1000.0, last
    if last == "s" and _MS_HEAD_RE.fullmatch(rest):  # "1s 234": a cut "1s 234ms"
        return (ms + int(rest) * 10 ** (3 - len(rest))) / 1000.0, "ms"
    return None


def parse_duration(s: str) -> float | None:
    """Seconds for "45s", "1m 30s", "2h 3m", "12s 345ms", "1d 2h 3m 4s"; None otherwise."""
    d = _duration(s)
    return d[0] if d else None


def parse_value(s: str) -> float | None:
    """A displayed value as a float under the module's rules, or None for text."""
    s = s.strip()
    if s.endswith("…"):  # cut by rich: trust it only when the cut fell in the decimals
        head = s[:-1]
        return parse_number(head) if "." in head else None
    n = parse_number(s)
    return n if n is not None else parse_duration(s)


def _is_value_token(tok: str) -> bool:
    if tok in _TEXT_VALUES or ("/" in tok and tok.endswith("G")):
        return True
    if tok.endswith("…") and parse_value(tok) is not None:
        return True
    return parse_number(tok) is not None or _DUR_TOKEN_RE.fullmatch(tok) is not None


def _timing(value: str) -> tuple[float | None, float | None]:
    """(seconds, percent) of a timing cell "1s 234  12%"; a cut duration gives None."""
    toks = value.split()
    pct = parse_number(toks.pop()) if toks and toks[-1].endswith("%") else None
    d = _duration(" ".join(toks)) if toks else None
    secs = d[0] if d and d[1] in ("s", "ms") else None
    return secs, pct


# ---------------------------------------------------------------------------------------------
# line cleaning

_CURSOR_HOME_RE = re.compile(r"\x1b\[(?:[01]?;[01]?)?H")
_ANSI_RE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|[()*+].?|[ -~]?)"
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _segments(line: str) -> list[tuple[bool, str]]:
    """Split on cursor-home escapes: (starts_new_screen, raw text) pieces."""
    parts = _CURSOR_HOME_RE.split(line)
    return [(i > 0, p) for i, p in enumerate(parts)]


def _clean(raw: str) -> str:
    s = _ANSI_RE.sub("", raw).replace("\t", " ")
    if "\r" in s:  # a carriage return overwrites: keep what was drawn last
        pieces = [p for p in s.split("\r") if p.strip()]
        s = pieces[-1] if pieces else ""
    return _CONTROL_RE.sub("", s).strip()


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9_./-]+", "_", label.strip().lower()).strip("_")


def _key(label: str) -> str:
    """A displayed log key kept as printed (case too), inner spaces as underscores."""
    return "_".join(label.split())


def _env_key(label: str) -> str:
    """An env-section row: the trainer strips the `env/` prefix, so put it back; a label that
    already has a section (the replica's `reward/raw_max`) is a full key as printed."""
    key = _key(label)
    return key if "/" in key else f"env/{key}"


def _resolve(label: str, names: Iterable[str]) -> str:
    """Undo rich's "…" cut when exactly one known name fits; else keep the label as shown."""
    if not label.endswith("…"):
        return label
    fits = [n for n in names if n.startswith(label[:-1])]
    return fits[0] if len(fits) == 1 else label


# ---------------------------------------------------------------------------------------------
# frame contents


class _Sink:
    """Bounded metrics/text collector for one frame."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.text: dict[str, str] = {}

    def _room(self, key: str) -> bool:
        full = len(self.metrics) + len(self.text) >= MAX_KEYS
        return bool(key) and (not full or key in self.metrics or key in self.text)

    def num(self, key: str, value: float | None) -> None:
        if value is not None and self._room(key):
            self.metrics[key] = value
            self.text.pop(key, None)

    def txt(self, key: str, value: str) -> None:
        if value and self._room(key):
            self.text[key] = value[:MAX_TEXT_CHARS]

    def put(self, key: str, raw: str) -> None:
        value = parse_value(raw)
        if value is not None:
            self.num(key, value)
        elif raw.strip() and parse_number(raw.strip().rstrip("…")) is None:
            self.txt(key, raw.strip())  # a cut number is dropped, real text is kept


def _inner(row: str) -> str | None:
    """Content between the side borders of a box row, None for a line that is not one."""
    if not row.startswith("│"):
        return None
    return row[1:-1] if len(row) > 1 and row.endswith("│") else row[1:]


def _rule(row: str, left: str, right: str) -> bool:
    return len(row) >= 3 and row[0] == left and row[-1] == right and not row[1:-1].strip("─")


def _token_cells(content: str, text_labels: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Generic "label value label value" reading: labels are runs of non-value tokens,
    values the runs of value tokens after them. A label in text_labels takes the next
    token as its (text) value."""
    cells: list[tuple[str, str]] = []
    label: list[str] = []
    values: list[str] = []
    for tok in content.split():
        if label and (_is_value_token(tok) or (not values and " ".join(label) in text_labels)):
            values.append(tok)
            continue
        if values:
            cells.append((" ".join(label), " ".join(values)))
            label, values = [], []
        label.append(tok)
    if label:
        cells.append((" ".join(label), " ".join(values)))
    return cells


def _cells_at(content: str) -> list[tuple[int, str]]:
    """Cells separated by two or more spaces, with their start offsets (rich layouts)."""
    return [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", content)]


# --- 5.0 --------------------------------------------------------------------------------------

_PANEL5_GAPS = ((0, 1), (10, 11), (24, 28), (40, 41), (47, 48), (52, 56), (66, 67), (74, 78))
_USER5_GAPS = ((0, 1), (26, 27), (36, 39), (64, 65), (74, 78))


def _fits(content: str, gaps: Sequence[tuple[int, int]]) -> bool:
    return len(content) == 78 and all(not content[a:b].strip() for a, b in gaps)


def _panel5_cells(content: str) -> list[tuple[str, str]]:
    """The 3-column panel row: exact upstream geometry first, generic tokens otherwise."""
    if not _fits(content, _PANEL5_GAPS):
        return _token_cells(content, text_labels=("Env",))
    timing = f"{content[41:47].strip()} {content[48:52].strip()}".strip()
    return [
        (content[1:10].strip(), content[11:24].strip()),
        (content[28:40].strip(), timing),
        (content[56:66].strip(), content[67:74].strip()),
    ]


def _user5_cells(content: str) -> list[tuple[str, str]]:
    if not _fits(content, _USER5_GAPS):
        return _token_cells(content)
    left = (content[1:26].strip(), content[27:36].strip())
    right = (content[39:64].strip(), content[65:74].strip())
    return [c for c in (left, right) if c[0]]


def _version(content: str, sink: _Sink) -> None:
    m = re.search(r"PufferLib\s+(\d+(?:\.\d+)*)", content, re.ASCII)
    if m:
        sink.txt("version", m[1])


def _header5(content: str, sink: _Sink) -> None:
    _version(content, sink)
    for m in re.finditer(r"([A-Za-z][A-Za-z_]*):\s*([^\s:]+)", content):
        label, value = m[1], m[2]
        if label == "VRAM":  # "3.1/48G": used and total GB
            used, _, total = value.partition("/")
            sink.num("util/vram_used_gb", parse_number(used))
            sink.num("util/vram_total_gb", parse_number(total))
        else:
            sink.num(HEADER5_KEYS.get(label, f"util/{_slug(label)}"), parse_number(value))


def _put_summary(sink: _Sink, label: str, value: str) -> str:
    """A first-column row (both versions); returns its key."""
    key = SUMMARY_KEYS.get(label) or _slug(label)
    if key == "env":
        sink.txt(key, value)
    else:
        sink.put(key, value)
    return key


def _put_timing(
    sink: _Sink, table: dict[tuple[str, str], str], parent: str, label: str, value: str
) -> str:
    """A timing row "label  time  share%"; returns the parent ("eval"/"train") for the rows
    below it, since both versions reuse sub-labels ("Model", "Copy") under each parent."""
    if label in PERF_PARENTS:
        parent = PERF_PARENTS[label]
        key = table.get(("", label), f"perf/{_slug(label)}")
    else:
        key = table.get((parent, label), f"perf/{parent}_{_slug(label)}")
    secs, pct = _timing(value)
    sink.num(key, secs)
    sink.num(f"{key}_pct", pct)
    return parent


def _section_prefix(title: str) -> str:
    slug = _slug(title)
    return "env" if slug in ENV_TITLES else slug


class _Box5:
    """Reads the rows of one 5.0 box (borders excluded) into a sink."""

    def __init__(self) -> None:
        self.sink = _Sink()
        self.title: str | None = None  # the current section's title, when it has one
        self.kind = ""  # "", "header", "panel" for the current section
        self.rows = 0  # rows read in the current section
        self.panel_seen = False
        self.parent = "eval"  # timing rows under "Evaluate" or "Train"

    def _new_section(self, title: str | None = None) -> None:
        self.title, self.kind, self.rows = title, "", 0

    def row(self, row: str) -> None:
        if row.startswith("├"):  # a mid rule, possibly titled "├─ Rewards ───┤"
            self._new_section(row.strip("├┤─ ") or None)
            return
        content = _inner(row)
        if content is None:  # other output interleaved with the box
            return
        if not content.strip():
            self._new_section()
        elif "PufferLib" in content:
            _header5(content, self.sink)
            self.kind = "header"
        elif not self._title(content):
            self.rows += 1
            self._body(content)

    def _title(self, content: str) -> bool:
        """A lone label opening an untitled section names it (our replica's extra sections)."""
        toks = content.split()
        if self.rows or self.title is not None or self.kind or len(toks) > 4:
            return False
        if any(_is_value_token(t) for t in toks) or toks[0] in SUMMARY_KEYS:
            return False
        self.title = content.strip()
        return True

    def _body(self, content: str) -> None:
        if self.title is not None:
            prefix = _section_prefix(self.title)
            for label, value in _user5_cells(content):
                self.sink.put(f"{prefix}/{_key(label)}", value)
        elif self.kind == "panel" or (not self.panel_seen and self._panel_like(content)):
            self.kind, self.panel_seen = "panel", True
            self._panel(content)
        else:
            for label, value in _user5_cells(content):
                self.sink.put(_env_key(label), value)

    @staticmethod
    def _panel_like(content: str) -> bool:
        first = content.split()[:2]
        return _fits(content, _PANEL5_GAPS) or bool(
            first and (first[0] in SUMMARY_KEYS or " ".join(first) in SUMMARY_KEYS)
        )

    def _panel(self, content: str) -> None:
        for i, (label, value) in enumerate(_panel5_cells(content)):
            if i == 0:
                _put_summary(self.sink, label, value)
            elif i == 1:
                self.parent = _put_timing(self.sink, PERF5, self.parent, label, value)
            elif label:
                key = "loss/total" if label == "Losses" else f"loss/{_slug(label)}"
                self.sink.num(key, parse_value(value))


def _interpret5(rows: Sequence[str]) -> _Sink:
    box = _Box5()
    for row in rows:
        box.row(row)
    return box.sink


_ONELINE_RE = re.compile(r"PufferLib\s+5\.\d+\s{2,}(.*)", re.ASCII)


def _oneline5(s: str) -> _Sink | None:
    """The compact 5.0 form. It may be cut at the terminal's width, so a field counts only
    when the two-space separator follows it, or when it is to_go (printed last)."""
    m = _ONELINE_RE.match(s)
    if not m:
        return None
    sink = _Sink()
    _version(s, sink)
    chunks = re.split(r"\s{2,}", m[1])  # values never hold two spaces in a row
    for i, chunk in enumerate(chunks):
        name, eq, value = chunk.partition("=")
        if not eq or not name or (i == len(chunks) - 1 and name != "to_go"):
            continue  # not a field, or the last one, which the terminal may have cut
        key = ONELINE_KEYS.get(name, name)
        if key == "env":
            sink.txt("env", value.strip())
        else:
            sink.put(key, value)
    return sink


# --- 3.0 --------------------------------------------------------------------------------------


def _find_cell(lines: Sequence[str], word: str) -> int | None:
    for i, line in enumerate(lines):
        if any(text == word for _, text in _cells_at(line)):
            return i
    return None


def _header3(lines: Sequence[str], sink: _Sink) -> None:
    """The "CPU: 45.2%" cells. At 80 columns rich wraps a value onto the next line under its
    label, so a label without a value takes the cells below it (columns ±2: the 🐡 is one
    character but two columns wide)."""
    if not lines:
        return
    _version(lines[0], sink)
    cells = _cells_at(lines[0])
    for n, (start, text) in enumerate(cells):
        m = re.fullmatch(r"([A-Za-z]+):\s*(.*)", text)
        if m:
            end = cells[n + 1][0] if n + 1 < len(cells) else MAX_ROW_CHARS
            value = m[2] or _below(lines[1:], start - 2, end - 2)
            sink.num(HEADER3_KEYS.get(m[1], f"util/{_slug(m[1])}"), parse_number(value))


def _below(lines: Sequence[str], lo: int, hi: int) -> str:
    return " ".join(t for line in lines for p, t in _cells_at(line) if lo <= p < hi)


class _Monitor3:
    """The Summary | Performance | Losses block, cut into columns at the header's offsets."""

    def __init__(self, sink: _Sink, head: str) -> None:
        self.sink = sink
        self.parent = "eval"
        self.last_text = ""
        cells = _cells_at(head)
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
        cells = _cells_at(part)
        if not cells:
            return
        if cells[0][0] > 1:  # no label: rich wrapped the previous text value
            if self.last_text in self.sink.text:
                joined = " ".join([self.sink.text[self.last_text], *(t for _, t in cells)])
                self.sink.txt(self.last_text, joined)
            return
        label = _resolve(cells[0][1], SUMMARY_KEYS)
        self.last_text = _put_summary(self.sink, label, cells[1][1] if len(cells) > 1 else "")

    def _perf(self, part: str) -> None:
        cells = _cells_at(part)
        if not cells:
            return
        label = _resolve(cells[0][1], [lab for par, lab in PERF3 if par in ("", self.parent)])
        value = " ".join(t for _, t in cells[1:])
        self.parent = _put_timing(self.sink, PERF3, self.parent, label, value)

    def _loss(self, part: str) -> None:
        cells = _cells_at(part)
        if len(cells) >= 2:
            name = _resolve(cells[0][1], LOSSES3)
            self.sink.num(f"loss/{_key(name)}", parse_value(cells[1][1]))


def _user3(lines: Sequence[str], sink: _Sink) -> None:
    """Two "User Stats | Value" tables side by side → env/<name>."""
    starts = [pos for pos, text in _cells_at(lines[0]) if text == "User Stats"]
    bounds = [*starts, None] if starts else [0, None]
    for line in lines[1:]:
        for a, b in itertools.pairwise(bounds):
            cells = [t for _, t in _cells_at(line[a:b])]
            for label, value in zip(cells[::2], cells[1::2], strict=False):
                sink.put(f"env/{_key(label)}", value)


def _interpret3(rows: Sequence[str]) -> _Sink:
    sink = _Sink()
    lines = [c for c in (_inner(r) for r in rows) if c is not None]
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


# ---------------------------------------------------------------------------------------------
# parsers


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
        for new_screen, raw in _segments(line[:MAX_LINE_CHARS]):
            if new_screen:  # the screen is redrawn from the top: a cut frame is lost
                self._reset()
            frames.extend(self._clean_line(_clean(raw)))
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
        if _rule(s, "╭", "╮"):
            self._rows, self._in_box = [], True
            return []
        if not self._in_box:
            return self._outside(s)
        if _rule(s, "╰", "╯"):
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
        reader = _interpret3 if version == "3" else _interpret5
        return self._emit(reader(self._rows), complete)

    def _emit(self, sink: _Sink, complete: bool) -> MetricsFrame:
        frame = MetricsFrame(self._count, sink.metrics, sink.text, self._line_no, complete)
        self._count += 1
        return frame


class Puffer5Parser(_BoxParser):
    name = "puffer5"

    def _outside(self, s: str) -> list[MetricsFrame]:
        sink = _oneline5(s)
        return [self._emit(sink, True)] if sink is not None and sink.metrics else []


class Puffer3Parser(_BoxParser):
    name = "puffer3"


class LinesParser:
    """Every non-empty line is progress; nothing else is known about the format."""

    name = "lines"

    def __init__(self) -> None:
        self._line_no = 0
        self._count = 0

    def feed(self, line: str) -> list[MetricsFrame]:
        self._line_no += 1
        if not _clean(line[:MAX_LINE_CHARS]):
            return []
        self._count += 1
        return [MetricsFrame(self._count - 1, {}, {}, self._line_no)]

    def finish(self) -> list[MetricsFrame]:
        return []


PARSERS: dict[str, Callable[[], Parser]] = {
    "puffer5": Puffer5Parser,
    "puffer3": Puffer3Parser,
    "lines": LinesParser,
}


def get_parser(name: str) -> Parser:
    factory = PARSERS.get(name)
    if factory is None:
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown dashboard parser {name!r} (known: {known})")
    return factory()


def _lines(text: str) -> Iterator[str]:
    """Lines of text without copying more than MAX_LINE_CHARS of any one of them."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end
        yield text[start : min(end, start + MAX_LINE_CHARS)]
        start = end + 1


def parse_text(name: str, text: str) -> list[MetricsFrame]:
    """All frames of a whole output (an unterminated last line is fed too), then finish()."""
    parser = get_parser(name)
    frames: list[MetricsFrame] = []
    for line in _lines(text):
        frames.extend(parser.feed(line))
    frames.extend(parser.finish())
    return frames


def latest(frames: Iterable[MetricsFrame]) -> dict[str, float]:
    """Metrics of the complete frames merged in order, so the last frame wins and keys only
    earlier frames showed (losses before the first update, say) are kept."""
    merged: dict[str, float] = {}
    for frame in frames:
        if frame.complete:
            merged.update(frame.metrics)
    return merged


# ---------------------------------------------------------------------------------------------
# end-of-run logs (5.0: logs/<env>/<run_id>.ini [metrics], optional .jsonl)


def _newest_log(logs: Path, env: str | None) -> Path | None:
    dirs = [logs / env] if env else [d for d in _listdir(logs) if d.is_dir()]
    best: tuple[float, str, Path] | None = None
    for d in dirs:
        for path in _listdir(d):
            if path.suffix != ".ini":
                continue
            try:
                key = (path.stat().st_mtime, path.name, path)
            except OSError:
                continue
            if best is None or key[:2] > best[:2]:
                best = key
    return best[2] if best else None


def _listdir(d: Path) -> list[Path]:
    try:
        return sorted(d.iterdir())
    except OSError:
        return []


def _read_capped(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _ini_metrics(path: Path) -> dict[str, float]:
    """[metrics] "key = v1,v2,…": one value per downsample point; the last one is final."""
    out: dict[str, float] = {}
    in_metrics = False
    for line in _read_capped(path).splitlines():
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            in_metrics = s == "[metrics]"
        elif in_metrics and "=" in s and not s.startswith(("#", ";")):
            key, _, values = s.partition("=")
            last = values.split(",")[-1].strip()
            value = parse_number(last)
            if key.strip() and value is not None:
                out[key.strip()] = value
    return out


def _jsonl_metrics(path: Path) -> dict[str, float]:
    """Numeric fields of every record, later records winning (the last record of each key)."""
    out: dict[str, float] = {}
    for line in _read_capped(path).splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[str(key)] = float(value)
    return out


def read_run_logs(root: Path, env: str | None = None) -> dict[str, float]:
    """Final metrics of the newest run under root/logs (root: the trainer's working dir).
    The .ini [metrics] values win over the .jsonl records; {} when there is no log."""
    ini = _newest_log(Path(root) / "logs", env)
    if ini is None:
        return {}
    out = _jsonl_metrics(ini.with_suffix(".jsonl"))
    out.update(_ini_metrics(ini))
    return out


def measured_sps(frames: Iterable[MetricsFrame]) -> float | None:
    """Training throughput: the median of the SPS shown on each new epoch's frame. Frames
    that repeat an epoch are left out (the replica reprints its last frame at exit; 3.0
    prints one after its final evaluation rollouts, with a misleading rate). The median of
    per-epoch rates is precise to the 3 digits shown, unlike steps/uptime whose uptime is
    shown in whole seconds."""
    rates: list[float] = []
    last_epoch = 0.0
    for frame in frames:
        epoch, sps = frame.metrics.get("epoch"), frame.metrics.get("SPS")
        if not frame.complete or epoch is None or sps is None or epoch <= last_epoch:
            continue
        last_epoch = epoch
        rates.append(sps)
    if not rates:
        return None
    rates.sort()
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2
