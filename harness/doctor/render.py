"""The doctor's output: status counts, a plain-text table, the JSON document
(schema "harness-doctor/1"), and the exit code."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from harness.doctor.model import SCHEMA, STATUSES, Probe
from harness.outcome import DoctorExit
from harness.vocab import DoctorStatus


def counts(probes: Sequence[Probe]) -> dict[str, int]:
    return {s: sum(p.status == s for p in probes) for s in STATUSES}


def render(probes: Sequence[Probe], width: int = 100) -> str:
    """A plain-text table: name, status, time, detail (wrapped), hint on its own line."""
    name_w = max([len("PROBE"), *(len(p.name) for p in probes)])
    lead = name_w + 16  # name, 2 spaces, status (6), space, time (6), space
    summary = ", ".join(f"{n} {s}" for s, n in counts(probes).items())
    lines = [f"harness doctor: {len(probes)} probes ({summary})", ""]
    lines.append(f"{'PROBE':<{name_w}}  STATUS   TIME DETAIL")
    for p in probes:
        head = f"{p.name:<{name_w}}  {p.status:<6} {p.duration_s:>5.1f}s "
        lines += _wrap(p.detail, head, lead, width)
        if p.hint:
            lines += _wrap(f"hint: {p.hint}", " " * lead, lead, width)
    return "\n".join(lines) + "\n"


def _wrap(text: str, first: str, indent: int, width: int) -> list[str]:
    return textwrap.wrap(
        text,
        width=max(width, indent + 30),
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def to_json(probes: Sequence[Probe]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "schema_version": 1,
        "ok": not any(p.status == DoctorStatus.FAIL for p in probes),
        "counts": counts(probes),
        "probes": [asdict(p) for p in probes],
    }


def exit_code(probes: Sequence[Probe]) -> int:
    """1 when any probe fails, else 0 (warnings are platform facts, not failures)."""
    failed = any(p.status == DoctorStatus.FAIL for p in probes)
    return DoctorExit.FAILED if failed else DoctorExit.OK
