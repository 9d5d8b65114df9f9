"""`harness diff A B`: what differs between two reports (or two repeat aggregates) that could
matter, next to how their verdicts differ. Exit 0 when the verdicts are the same, 1 when
they differ (like diff(1)), the usage code for input that is not a report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness import outcome
from harness.pipeline.diff import DiffResult, diff_paths
from harness.text import terminal_safe

NAME = "diff"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="what differs between two reports (host, source, settings) and their verdicts",
        description="Compare two saved runs: each a report (its folder or report.json) or a "
        "repeat aggregate (its folder or repeat.json; its first run's report gives the "
        "settings and host, its rates the verdict). Lists what differs that could matter "
        "(the host fingerprint, CPU affinity first; pin and source hashes; variant; trainer "
        "arguments, environment and knobs; build; conditions; limits) next to the verdicts. "
        "Runs nothing.",
        epilog=outcome.exit_help(NAME),
    )
    p.add_argument("a", type=Path, metavar="A", help="a report or repeat aggregate")
    p.add_argument("b", type=Path, metavar="B", help="the other one")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def command(args: argparse.Namespace) -> int:
    result = diff_paths(args.a, args.b)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print_diff(result, sys.stdout)
    return result.exit_code


def print_diff(result: DiffResult, stream: TextIO) -> None:
    """Two tables (what differs, the verdicts) and the notes, for people."""
    console = Console(file=stream, highlight=False, soft_wrap=False)
    console.print(_shown(f"A: {result.a.label()}"))
    console.print(_shown(f"B: {result.b.label()}"))
    if result.changes:
        table = Table("", "what differs", "A", "B", title="what differs that could matter")
        section = ""
        for c in result.changes:
            shown_section = c.section if c.section != section else ""
            section = c.section
            table.add_row(_shown(shown_section), _shown(c.key), _shown(c.a), _shown(c.b))
        console.print(table)
    elif result.a.report is not None and result.b.report is not None:
        console.print("no setting or host fact differs")
    verdicts = Table("verdict", "A", "B", "", title="verdicts")
    for row in result.verdicts:
        mark = "[bold red]differs[/]" if row.differs else ""
        verdicts.add_row(_shown(row.key), _shown(row.a), _shown(row.b), mark)
    console.print(verdicts)
    for note in result.notes:
        console.print(_shown(note))
    end = "the verdicts differ" if result.verdicts_differ else "the verdicts are the same"
    console.print(f"[bold]{end}[/]")


def _shown(text: str) -> str:
    """Report text for the terminal: one line, no terminal controls, escaped as rich markup."""
    return escape(" ".join(terminal_safe(text).split()))
