"""The hazards of a run, from its records (hazards/records.py), named (hazards/symbols.py),
judged by the fork rules (hazards/forks.py) and the lock-order graph (hazards/lockorder.py);
each marked when it is the one `--expect hazard:…` looks for (hazards/expect.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.hazards.context import Context
from harness.hazards.expect import HazardExpect
from harness.hazards.forks import fork_hazards
from harness.hazards.lockorder import native_cycles, python_cycles
from harness.hazards.model import HazardReport
from harness.hazards.records import read_records

# the report lists at most this many (most relevant first: the expected ones, then forks)
MAX_HAZARDS = 32


def find_hazards(folder: Path, expect: HazardExpect | None = None) -> HazardReport:
    """The hazards recorded in a run's hazards folder (an empty report when there is none)."""
    rec = read_records(folder)
    ctx = Context(rec)
    forks, safe = fork_hazards(ctx)
    native_cycles(ctx)
    python_cycles(ctx)
    hazards = [
        dataclasses.replace(h, expected=expect is not None and expect.matches(h))
        for h in ctx.found.values()
    ]
    hazards.sort(key=lambda h: not h.expected)  # stable: forks, then cycles, as found
    notes = [f"hazard records dropped: {d}" for d in rec.dropped] + rec.unreadable
    if rec.bad_lines:
        notes.append(f"{rec.bad_lines} hazard record line(s) did not parse")
    if len(hazards) > MAX_HAZARDS:
        notes.append(f"{len(hazards) - MAX_HAZARDS} more hazard(s) not listed")
    pids = set(rec.processes) | {int(p.get("pid") or 0) for p in rec.py_forks + rec.py_edges}
    return HazardReport(
        hazards=hazards[:MAX_HAZARDS],
        processes=len(pids - {0}),
        forks=forks,
        safe_forks=safe,
        notes=notes,
        expect=expect.spec() if expect else "",
    )
