"""What every format shares: line cleanup (ANSI escapes, control characters, cursor-home
screen redraws), label → key slugs, the bounded frame sink, box-row cells, and the Summary and
timing rows that the 5.0 and 3.0 boxes print alike."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.dashboard.values import is_value_token, parse_number, parse_timing, parse_value

MAX_LINE_CHARS = 64 * 1024  # lines are cut to this before parsing
MAX_FRAME_LINES = 500  # a "box" longer than this is not a dashboard: discard it
MAX_ROW_CHARS = 4096  # rows of a box are cut to this when kept (real rows are < 300)
MAX_KEYS = 1000  # per frame, so a hostile box cannot grow a frame without bound
MAX_TEXT_CHARS = 200  # per text value

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
PERF_PARENTS = {"Evaluate": "eval", "Train": "train"}


@dataclass
class MetricsFrame:
    index: int  # 0-based frame number in the stream
    metrics: dict[str, float]  # canonical log keys → values
    text: dict[str, str]  # keys whose shown value is not numeric (e.g. "env")
    line_no: int  # 1-based output line on which the frame ended
    complete: bool = True  # False only for a partial box flushed by finish()


# ---------------------------------------------------------------------------------------------
# line cleaning

_CURSOR_HOME_RE = re.compile(r"\x1b\[(?:[01]?;[01]?)?H")
_ANSI_RE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|[()*+].?|[ -~]?)"
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def segments(line: str) -> list[tuple[bool, str]]:
    """Split on cursor-home escapes: (starts_new_screen, raw text) pieces."""
    parts = _CURSOR_HOME_RE.split(line)
    return [(i > 0, p) for i, p in enumerate(parts)]


def clean_line(raw: str) -> str:
    s = _ANSI_RE.sub("", raw).replace("\t", " ")
    if "\r" in s:  # a carriage return overwrites: keep what was drawn last
        pieces = [p for p in s.split("\r") if p.strip()]
        s = pieces[-1] if pieces else ""
    return _CONTROL_RE.sub("", s).strip()


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9_./-]+", "_", label.strip().lower()).strip("_")


def label_key(label: str) -> str:
    """A displayed log key kept as printed (case too), inner spaces as underscores."""
    return "_".join(label.split())


def env_label_key(label: str) -> str:
    """An env-section row: the trainer strips the `env/` prefix, so put it back; a label that
    already has a section (the replica's `reward/raw_max`) is a full key as printed."""
    key = label_key(label)
    return key if "/" in key else f"env/{key}"


def resolve_label(label: str, names: Iterable[str]) -> str:
    """Undo rich's "…" cut when exactly one known name fits; else keep the label as shown."""
    if not label.endswith("…"):
        return label
    fits = [n for n in names if n.startswith(label[:-1])]
    return fits[0] if len(fits) == 1 else label


# ---------------------------------------------------------------------------------------------
# frame contents


class Sink:
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


def box_inner(row: str) -> str | None:
    """Content between the side borders of a box row, None for a line that is not one."""
    if not row.startswith("│"):
        return None
    return row[1:-1] if len(row) > 1 and row.endswith("│") else row[1:]


def is_rule(row: str, left: str, right: str) -> bool:
    return len(row) >= 3 and row[0] == left and row[-1] == right and not row[1:-1].strip("─")


def token_cells(content: str, text_labels: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Generic "label value label value" reading: labels are runs of non-value tokens,
    values the runs of value tokens after them. A label in text_labels takes the next
    token as its (text) value."""
    cells: list[tuple[str, str]] = []
    label: list[str] = []
    values: list[str] = []
    for tok in content.split():
        if label and (is_value_token(tok) or (not values and " ".join(label) in text_labels)):
            values.append(tok)
            continue
        if values:
            cells.append((" ".join(label), " ".join(values)))
            label, values = [], []
        label.append(tok)
    if label:
        cells.append((" ".join(label), " ".join(values)))
    return cells


def cells_at(content: str) -> list[tuple[int, str]]:
    """Cells separated by two or more spaces, with their start offsets (rich layouts)."""
    return [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", content)]


# --- rows both box versions print -------------------------------------------------------------


def put_version(content: str, sink: Sink) -> None:
    m = re.search(r"PufferLib\s+(\d+(?:\.\d+)*)", content, re.ASCII)
    if m:
        sink.txt("version", m[1])


def put_summary(sink: Sink, label: str, value: str) -> str:
    """A first-column row (both versions); returns its key."""
    key = SUMMARY_KEYS.get(label) or slug(label)
    if key == "env":
        sink.txt(key, value)
    else:
        sink.put(key, value)
    return key


def put_timing(
    sink: Sink, table: dict[tuple[str, str], str], parent: str, label: str, value: str
) -> str:
    """A timing row "label  time  share%"; returns the parent ("eval"/"train") for the rows
    below it, since both versions reuse sub-labels ("Model", "Copy") under each parent."""
    if label in PERF_PARENTS:
        parent = PERF_PARENTS[label]
        key = table.get(("", label), f"perf/{slug(label)}")
    else:
        key = table.get((parent, label), f"perf/{parent}_{slug(label)}")
    secs, pct = parse_timing(value)
    sink.num(key, secs)
    sink.num(f"{key}_pct", pct)
    return parent
