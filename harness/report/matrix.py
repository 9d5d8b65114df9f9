"""The one writer of a multi-run table (compare, sweep, bisect): from a list of `RunRow`s, a
title and the coordinates that vary, the JSON (`<mode>.json`), the Markdown (`<mode>.md`),
index.html, the GitHub step-summary table and the terminal table.

The columns are data (`Column`): the coordinates first, then `RESULT_COLUMNS`, the same for
every command. A new column (a hang rate once rows count repeated runs) is one entry there;
a new multi-run command builds a `Matrix` and calls `write_matrix` and `print_matrix`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness import outcome
from harness.filenames import INDEX_HTML, REPORT_HTML, table_json, table_md
from harness.files import atomic_write
from harness.report import github, markdown
from harness.report.html import render_index
from harness.report.runs import RunRow
from harness.text import terminal_safe
from harness.vocab import TableKind

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[RunRow], object]


def axis(label: str) -> Column:
    """The column of one coordinate (a variant, a knob, a commit)."""
    return Column(label, lambda r: r.coordinate(label))


RESULT_COLUMNS: tuple[Column, ...] = (
    Column("verdict", lambda r: r.kind),
    Column("mechanism", lambda r: r.mechanism),
    Column("location", lambda r: r.location),
    Column("cause", lambda r: r.cause),
    Column("epochs", lambda r: r.epochs),
    Column("failed checks", lambda r: ", ".join(r.checks_failed)),
    Column("why", lambda r: r.summary),
)
REPORT_COLUMN = Column("report", lambda r: r.report_dir)


def _runs_text(row: RunRow) -> str | None:
    """A repeated cell's runs: `2/3 failed`; None for a single run."""
    if row.runs <= 1:
        return None
    failed = sum(n for k, n in row.kinds.items() if outcome.reproduces(k))
    return f"{failed}/{row.runs} failed"


# only where some row stands for repeated runs (after the verdict column)
RUNS_COLUMN = Column("runs", _runs_text)


@dataclass
class Matrix:
    """A multi-run command's table: `mode` names its files (compare.json, sweep.md …)."""

    mode: TableKind
    title: str  # "harness compare breakout"
    axes: list[str]  # the coordinates that vary, in column order
    rows: list[RunRow]
    conclusion: list[str] = field(default_factory=list)  # what the runs say together
    env: str | None = None
    # the JSON key of the rows: "variants" (compare.json) and "cells" (sweep.json) as
    # their readers know them
    rows_key: str = "rows"
    extra: dict[str, Any] = field(default_factory=dict)  # the command's own JSON keys
    # a command with columns of its own (bisect's steps); default: axes, results, report
    columns: list[Column] | None = None
    # the terminal prints each failed row's summary under the table (not for repeated runs
    # of one cell: the conclusion groups them)
    row_notes: bool = True
    # a figure for index.html under the conclusion: SVG the command built, every text in it
    # escaped by its maker (bisect's posterior per commit)
    figure: str = ""

    def table_columns(self) -> list[Column]:
        if self.columns is not None:
            return self.columns
        results = list(RESULT_COLUMNS)
        if any(r.runs > 1 for r in self.rows):
            results.insert(1, RUNS_COLUMN)
        return [*map(axis, self.axes), *results, REPORT_COLUMN]

    def table(self) -> list[str]:
        """The Markdown table (compare.md, sweep.md, the step summary, bisect's steps)."""
        cols = self.table_columns()
        return markdown.table(
            [c.header for c in cols], ([c.value(r) for c in cols] for r in self.rows)
        )

    def to_json(self, directory: Path | None = None) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "mode": self.mode,
            "title": self.title,
            "env": self.env,
            "directory": str(directory) if directory is not None else None,
            "axes": list(self.axes),
            self.rows_key: [r.to_json() for r in self.rows],
            "conclusion": list(self.conclusion),
            **self.extra,
        }

    def markdown(self) -> str:
        said = [f"- {markdown.md(c, paragraph=True)}" for c in self.conclusion]
        head = f"# {markdown.md(self.title)}"
        return "\n".join([head, "", *said, "", *self.table()]) + "\n"


def write_index(m: Matrix, out: Path) -> Path:
    """index.html in `out`, each row linked to its run's report.html."""
    path = out / INDEX_HTML
    atomic_write(path, render_index(m.title, m.rows, m.axes, out, m.conclusion, m.figure))
    return path


def publish(m: Matrix) -> bool:
    """Under GitHub Actions: the table in the job's step summary."""
    return github.publish_table(m.title, m.table(), m.conclusion)


def write_matrix(
    m: Matrix, out: Path, also_report_html: bool = False, step_summary: bool = True
) -> None:
    """Every file of a multi-run command in `out`, and the step summary under Actions; with
    `also_report_html`, index.html is report.html too (the aggregate of repeated runs is the
    folder's report)."""
    atomic_write(out / table_json(m.mode), json.dumps(m.to_json(out), indent=2) + "\n")
    atomic_write(out / table_md(m.mode), m.markdown())
    index = write_index(m, out)
    if also_report_html:
        atomic_write(out / REPORT_HTML, index.read_text(encoding="utf-8"))
    if step_summary:  # a cell of a larger table is not published on its own
        publish(m)


def print_matrix(m: Matrix, out: Path, as_json: bool, stream: TextIO | None = None) -> None:
    """The command's stdout: the JSON, or the table (verdicts in their colours), the
    conclusion and the folder."""
    if as_json:
        print(json.dumps(m.to_json(out), indent=2), file=stream)
        return
    console = Console(file=stream, highlight=False)
    # the short columns in the table; the long "why" under it, for the runs that did not pass
    long = (REPORT_COLUMN.header, "why", "mechanism")
    cols = [c for c in m.table_columns() if c.header not in long]
    table = Table(*(c.header for c in cols), title=m.title)
    for row in m.rows:
        cells = []
        for c in cols:
            text = _shown(markdown.value_text(c.value(row)))
            cells.append(f"[{outcome.style(row.kind)}]{text}[/]" if c.header == "verdict" else text)
        table.add_row(*cells)
    console.print(table)
    for row in m.rows if m.row_notes else ():
        if row.kind != outcome.Kind.PASS and row.summary:
            label = ", ".join(f"{a}={row.coordinate(a)}" for a in m.axes) or row.variant
            console.print(_shown(f"{label}: {row.summary}"), soft_wrap=True)
    for line in m.conclusion:
        console.print(_shown(line))
    console.print(_shown(f"report: {out}"))


def _shown(text: str) -> str:
    """Run text for the terminal: one line, no terminal controls, escaped as rich markup."""
    return escape(" ".join(terminal_safe(text).split()))
