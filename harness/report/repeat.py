"""Repeated runs, told together: the rate, its interval, the failures grouped by signature
(docs/repeat.md). Used for one cell repeated (`harness run/watch --repeat N`, repeat.json),
for each cell of a sweep or variant of a compare (the cell's row counts its runs), and by
`harness collect` over runs made elsewhere.

A run *ran* when the trainer ran to a verdict of its own (not `error`: it could not be
prepared; not `interrupted`; not `build-failed`). The failure rate counts the runs whose kind
reproduces a failure (outcome.reproduces: hang, crash, error exit, failed check) among the
runs that ran; the hang rate counts `hang` alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import outcome
from harness.outcome import Kind
from harness.report.matrix import Matrix
from harness.report.model import plain
from harness.report.runs import RunRow
from harness.report.signature import FailureSignature
from harness.stats import Rate, pct
from harness.vocab import TableKind

RUN_AXIS = "run"
NOT_RAN = frozenset({Kind.ERROR, Kind.INTERRUPTED, Kind.BUILD_FAILED})


def ran(rows: Sequence[RunRow]) -> int:
    return sum(n for r in rows for k, n in r.kinds.items() if k not in NOT_RAN)


def failure_rate(rows: Sequence[RunRow]) -> Rate:
    """Runs that reproduced a failure, of the runs that ran."""
    failed = sum(n for r in rows for k, n in r.kinds.items() if outcome.reproduces(k))
    return Rate(failed, ran(rows))


def kind_rate(rows: Sequence[RunRow], kind: Kind) -> Rate:
    return Rate(sum(r.kinds.get(kind, 0) for r in rows), ran(rows))


@dataclass(frozen=True)
class Group:
    """The failures with one signature, how many, and the first of them."""

    signature: FailureSignature
    count: int
    first_run: str | None  # the report folder of its first member

    def to_json(self) -> dict[str, Any]:
        return {**plain(self.signature), "count": self.count, "first_run": self.first_run}


def groups(rows: Sequence[RunRow]) -> list[Group]:
    """The single runs that failed, by signature, the largest group first (ties: first
    seen). Rows that combine runs contribute their own groups through `combine` instead."""
    seen: dict[FailureSignature, list[RunRow]] = {}
    for r in rows:
        if outcome.reproduces(r.kind):
            seen.setdefault(r.signature, []).append(r)
    found = [Group(sig, len(members), members[0].report_dir) for sig, members in seen.items()]
    return sorted(found, key=lambda g: -g.count)


def summary_line(rows: Sequence[RunRow]) -> str:
    """`hang 7/30 (23%, 95% CI 12–41%) — all in lock_b (lock-cycle)`; or what ran when no run
    failed, or why none ran."""
    n = ran(rows)
    if not n:
        errors = Counter(r.kind for r in rows)
        return "no run ran: " + ", ".join(f"{c} {k}" for k, c in errors.items())
    found = groups(rows)
    if not found:
        lo, hi = failure_rate(rows).ci95
        return f"pass {n}/{n}: no failure (failure rate 95% CI {pct(lo, '')}–{pct(hi)})"
    top = found[0].signature.kind
    same = [g for g in found if g.signature.kind is top]
    text = kind_rate(rows, top).text()
    if len(same) == 1:
        where = same[0].signature
        place = f" — all in {where.location}" if where.location else " — all alike"
        place += f" ({where.cause})" if where.cause else ""
    else:
        place = " — " + ", ".join(f"{g.count} in {g.signature.location or '?'}" for g in same)
    others = [g for g in found if g.signature.kind is not top]
    if others:
        rest = Counter[Kind]()
        for g in others:
            rest[g.signature.kind] += g.count
        place += "; also " + ", ".join(f"{k} {c}/{n}" for k, c in rest.items())
    return f"{top} {text}{place}"


def exit_code(rows: Sequence[RunRow]) -> int:
    """0 when every run passed; an interrupted run's code (128 + N) when the runs were
    stopped; else the code of the failure seen most often (ties: the first seen); the usage
    code when no run ran."""
    for r in rows:
        if r.exit_code is not None and r.exit_code >= outcome.INTERRUPTED_BASE:
            return r.exit_code
    found = groups(rows)
    if found:
        return outcome.exit_code(found[0].signature.kind)
    kinds = [k for r in rows for k in r.kinds if k not in NOT_RAN]
    if kinds:  # no failure sought: a pass, unless a run ended otherwise (too slow)
        other = next((k for k in kinds if k is not Kind.PASS), None)
        return outcome.exit_code(other) if other else outcome.PASS
    codes = [r.exit_code for r in rows if r.exit_code is not None]
    return codes[0] if codes else outcome.USAGE


def combine(rows: Sequence[RunRow], values: dict[str, str], variant: str, folder: Path) -> RunRow:
    """One row standing for `rows` (the runs of one cell): its counts by kind, the top
    failure group's kind, place and cause, the summary line, the cell's folder."""
    if len(rows) == 1 and not values.get(RUN_AXIS):
        return rows[0]
    counts = Counter[Kind]()
    for r in rows:
        counts.update(r.kinds)
    found = groups(rows)
    first = rows[0] if rows else RunRow()
    # the row that speaks for the cell: the first run of its top failure group, else its first
    top = next((r for r in rows if found and r.report_dir == found[0].first_run), first)
    return RunRow(
        values=dict(values),
        variant=variant,
        kind=top.kind if found else max(counts, key=lambda k: counts[k], default=Kind.ERROR),
        mechanism=top.mechanism if found else None,
        location=top.location if found else None,
        location_frames=list(top.location_frames) if found else [],
        cause=top.cause if found else None,
        summary=summary_line(rows),
        error=None if ran(rows) else first.error,
        exit_code=exit_code(rows),
        run_s=sum(r.run_s or 0.0 for r in rows) or None,
        wall_s=sum(r.wall_s or 0.0 for r in rows) or None,
        report_dir=str(folder),
        epochs=top.epochs,
        sps=top.sps,
        checks_failed=sorted({c for r in rows for c in r.checks_failed}),
        evidence=list(top.evidence) if found else [],
        build_key=first.build_key,
        build_ok=first.build_ok,
        build_s=first.build_s,
        cache_hit=all(r.cache_hit for r in rows)
        if all(r.cache_hit is not None for r in rows)
        else None,
        runs=sum(r.runs for r in rows),
        counts=dict(counts),
    )


def aggregate(rows: Sequence[RunRow]) -> dict[str, Any]:
    """The aggregate block of repeat.json (and of `--json`): runs, counts, rates and their
    intervals, the failure groups."""
    counts = Counter[str]()
    for r in rows:
        counts.update({str(k): n for k, n in r.kinds.items()})
    hang, failure = kind_rate(rows, Kind.HANG), failure_rate(rows)
    return {
        "runs": sum(r.runs for r in rows),
        "ran": ran(rows),
        "counts": dict(counts),
        "hang_rate": hang.value,
        "hang_rate_ci95": list(hang.ci95),
        "failure_rate": failure.value,
        "failure_rate_ci95": list(failure.ci95),
        "groups": [g.to_json() for g in groups(rows)],
        "summary": summary_line(rows),
    }


def repeat_matrix(
    title: str, env: str | None, rows: Sequence[RunRow], out: Path | None = None
) -> Matrix:
    """The table of one repeated cell: a row per run, the aggregate as the conclusion and
    in repeat.json's own keys (`out`: the folder, to name each group's first run in it)."""
    said = [summary_line(rows)]
    said += [
        f"{g.count} × {g.signature.text()} — first: {_inside(g.first_run, out)}"
        for g in groups(rows)
    ]
    return Matrix(
        mode=TableKind.REPEAT,
        title=title,
        axes=[RUN_AXIS],
        rows=list(rows),
        conclusion=said,
        env=env,
        extra=aggregate(rows),
        row_notes=False,
    )


def _inside(path: str | None, out: Path | None) -> str:
    if path is None:
        return "-"
    if out is not None:
        try:
            return str(Path(path).relative_to(out))
        except ValueError:
            pass
    return path
