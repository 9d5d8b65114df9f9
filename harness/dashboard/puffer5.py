"""The PufferLib 5.0 dashboard: an 80-column Unicode box (``╭─╮ │ ╰─╯``) with the header
``PufferLib 5.0`` and a 🐡, printed once per logged epoch, and its one-line compact form
(``PufferLib 5.0  env=…  steps=…``) used on small terminals. Our replica prints the same box and
may add rows and sections."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.dashboard.text import (
    SUMMARY_KEYS,
    Sink,
    box_inner,
    env_label_key,
    label_key,
    put_summary,
    put_timing,
    put_version,
    slug,
    token_cells,
)
from harness.dashboard.values import is_value_token, parse_number, parse_value

PERF5 = {  # 5.0 timing column, (parent, label) → key; parents have parent ""
    ("", "Evaluate"): "perf/rollout",
    ("eval", "Model"): "perf/eval_model",
    ("eval", "Env"): "perf/eval_env",
    ("eval", "Copy"): "perf/eval_copy",
    ("", "Train"): "perf/train",
    ("train", "Model"): "perf/train_model",
    ("train", "Misc"): "perf/train_misc",
}
HEADER5_KEYS = {"GPU": "util/gpu_percent", "RAM": "util/cpu_mem_gb"}  # VRAM is split in two
ONELINE_KEYS = {"env": "env", "steps": "agent_steps", "SPS": "SPS", "score": "env/score"}
ENV_TITLES = {"env", "environment", "user_stats", "stats"}  # titled sections that mean env/

_PANEL5_GAPS = ((0, 1), (10, 11), (24, 28), (40, 41), (47, 48), (52, 56), (66, 67), (74, 78))
_USER5_GAPS = ((0, 1), (26, 27), (36, 39), (64, 65), (74, 78))


def _fits(content: str, gaps: Sequence[tuple[int, int]]) -> bool:
    return len(content) == 78 and all(not content[a:b].strip() for a, b in gaps)


def _panel5_cells(content: str) -> list[tuple[str, str]]:
    """The 3-column panel row: exact upstream geometry first, generic tokens otherwise."""
    if not _fits(content, _PANEL5_GAPS):
        return token_cells(content, text_labels=("Env",))
    timing = f"{content[41:47].strip()} {content[48:52].strip()}".strip()
    return [
        (content[1:10].strip(), content[11:24].strip()),
        (content[28:40].strip(), timing),
        (content[56:66].strip(), content[67:74].strip()),
    ]


def _user5_cells(content: str) -> list[tuple[str, str]]:
    if not _fits(content, _USER5_GAPS):
        return token_cells(content)
    left = (content[1:26].strip(), content[27:36].strip())
    right = (content[39:64].strip(), content[65:74].strip())
    return [c for c in (left, right) if c[0]]


def _header5(content: str, sink: Sink) -> None:
    put_version(content, sink)
    for m in re.finditer(r"([A-Za-z][A-Za-z_]*):\s*([^\s:]+)", content):
        label, value = m[1], m[2]
        if label == "VRAM":  # "3.1/48G": used and total GB
            used, _, total = value.partition("/")
            sink.num("util/vram_used_gb", parse_number(used))
            sink.num("util/vram_total_gb", parse_number(total))
        else:
            sink.num(HEADER5_KEYS.get(label, f"util/{slug(label)}"), parse_number(value))


def _section_prefix(title: str) -> str:
    name = slug(title)
    return "env" if name in ENV_TITLES else name


class _Box5:
    """Reads the rows of one 5.0 box (borders excluded) into a sink."""

    def __init__(self) -> None:
        self.sink = Sink()
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
        content = box_inner(row)
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
        if any(is_value_token(t) for t in toks) or toks[0] in SUMMARY_KEYS:
            return False
        self.title = content.strip()
        return True

    def _body(self, content: str) -> None:
        if self.title is not None:
            prefix = _section_prefix(self.title)
            for label, value in _user5_cells(content):
                self.sink.put(f"{prefix}/{label_key(label)}", value)
        elif self.kind == "panel" or (not self.panel_seen and self._panel_like(content)):
            self.kind, self.panel_seen = "panel", True
            self._panel(content)
        else:
            for label, value in _user5_cells(content):
                self.sink.put(env_label_key(label), value)

    @staticmethod
    def _panel_like(content: str) -> bool:
        first = content.split()[:2]
        return _fits(content, _PANEL5_GAPS) or bool(
            first and (first[0] in SUMMARY_KEYS or " ".join(first) in SUMMARY_KEYS)
        )

    def _panel(self, content: str) -> None:
        for i, (label, value) in enumerate(_panel5_cells(content)):
            if i == 0:
                put_summary(self.sink, label, value)
            elif i == 1:
                self.parent = put_timing(self.sink, PERF5, self.parent, label, value)
            elif label:
                key = "loss/total" if label == "Losses" else f"loss/{slug(label)}"
                self.sink.num(key, parse_value(value))


def interpret5(rows: Sequence[str]) -> Sink:
    box = _Box5()
    for row in rows:
        box.row(row)
    return box.sink


_ONELINE_RE = re.compile(r"PufferLib\s+5\.\d+\s{2,}(.*)", re.ASCII)


def oneline5(s: str) -> Sink | None:
    """The compact 5.0 form. It may be cut at the terminal's width, so a field counts only
    when the two-space separator follows it, or when it is to_go (printed last)."""
    m = _ONELINE_RE.match(s)
    if not m:
        return None
    sink = Sink()
    put_version(s, sink)
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
