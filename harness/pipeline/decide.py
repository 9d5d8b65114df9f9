"""Decisions taken on rates, never on a lucky run (docs/repeat.md):

- `compare`: a fix is confirmed only when the baseline reproduced its failure and each fix's
  failure rate is *separated* below the baseline's (its 95% upper bound under the baseline's
  95% lower bound, harness/stats.py). Otherwise: refuted (a fix fails as often as the
  baseline: no number of runs would separate them at the rates seen), unsettled (how many
  runs per variant would settle it), or not reproduced (the baseline never failed).
- `sweep`: a knob changes the outcome when, with the other knobs held, two of its cells are
  separated on the rate of some verdict kind; it is ruled out when every such group of cells
  ended the same way in every run, with enough runs that the opposite would have been
  separated; otherwise it is unsettled, never ruled out.

Pure: rows in, a decision and its sentence out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.outcome import Kind
from harness.report.repeat import failure_rate, kind_rate, ran
from harness.report.runs import RunRow
from harness.stats import Rate, runs_to_separate, separated
from harness.vocab import Decision, KnobEffect


@dataclass(frozen=True)
class Judged:
    decision: Decision
    why: str
    # runs per variant (or cell) that would settle an unsettled decision at the rates seen
    runs_needed: int | None = None
    ran: bool = True  # the baseline ran (a not-reproduced baseline may still fail later)

    @property
    def confirmed(self) -> bool:
        return self.decision is Decision.CONFIRMED


def _where(row: RunRow) -> str:
    return f" in {row.location}" if row.location else ""


def judge_compare(rows: Sequence[RunRow]) -> Judged:
    """The baseline (the first row) against every fix (the rest)."""
    base, fixes = rows[0], list(rows[1:])
    b = failure_rate([base])
    if b.runs == 0:
        return Judged(
            Decision.NOT_REPRODUCED,
            f"not confirmed: the baseline {base.variant} did not run ({base.summary})",
            ran=False,
        )
    if b.failures == 0:
        if all(k is Kind.PASS for k in base.kinds if k not in (Kind.ERROR,)):
            hi = round(100 * b.ci95[1])
            what = f"passes {_runs(b)} (failure rate 95% CI 0–{hi}%: nothing to fix here)"
        else:
            what = f"did not reproduce a failure ({base.kind})"
        return Judged(Decision.NOT_REPRODUCED, f"not confirmed: the baseline {base.variant} {what}")
    if not fixes:
        return Judged(Decision.REFUTED, "not confirmed: no fix variant given")
    shown_base = f"{base.variant} → {base.kind} {b.text()}{_where(base)}"
    bad: list[str] = []
    unsettled: list[tuple[str, int | None]] = []
    for fix in fixes:
        f = failure_rate([fix])
        if f.runs == 0:
            bad.append(f"{fix.variant} did not run ({fix.summary})")
        elif separated(f, b):
            continue
        elif _no_fix(f, b):
            bad.append(
                f"{fix.variant} → {fix.kind} {f.text()}: surely at least half as often as the "
                "baseline"
            )
        else:  # None: not separable at the rates seen, though not surely no fix: more runs
            unsettled.append((f"{fix.variant} {f.text()}", runs_to_separate(f, b)))
    if bad:
        return Judged(Decision.REFUTED, "not confirmed: " + "; ".join(bad) + f" ({shown_base})")
    if unsettled:
        needs = [n for _, n in unsettled]
        fixes_shown = ", ".join(text for text, _ in unsettled)
        if None in needs:  # a fix failing as often as the baseline, not yet surely
            return Judged(
                Decision.UNSETTLED,
                f"not settled: {shown_base}; {fixes_shown}: no better than the baseline so "
                "far, not yet surely no fix (more runs: --repeat auto)",
            )
        need = max(n for n in needs if n is not None)
        return Judged(
            Decision.UNSETTLED,
            f"not settled: {shown_base}; {fixes_shown}: about {need} runs per variant would "
            "settle it at the rates seen (--repeat auto)",
            need,
        )
    shown = ", ".join(f"{r.variant} → {_fails(r)}" for r in fixes)
    return Judged(Decision.CONFIRMED, f"fix confirmed: {shown_base}; {shown}")


def _no_fix(fix: Rate, base: Rate) -> bool:
    """Surely no fix: the fix fails at least as often as the baseline so far, and its 95%
    lower bound is at least half the baseline's upper bound (it surely keeps half of the
    failures the baseline may have, or more). At 4/4 against 4/4 that holds (51% against
    50%); at 2/4 against 1/4 it does not (15% against 35%): a better fix may have been
    unlucky and the baseline lucky, so more runs are made."""
    return fix.value >= base.value and fix.ci95[0] >= 0.5 * base.ci95[1]


def next_round(judged: Judged, have: int, cap: int) -> int | None:
    """With `--repeat auto`: the runs per variant to reach next (all variants have `have`),
    or None to stop: the decision is settled, it cannot settle at the rates seen, or the cap
    is reached. Unsettled: what would settle it, at least one more. A baseline that has not
    failed yet may be a rare failure (a 25% hang passes four runs in a row 32% of the time):
    its runs double until it fails or the cap is reached. Never past `cap`."""
    if have >= cap:
        return None
    if judged.decision is Decision.UNSETTLED:
        return min(cap, max(judged.runs_needed or 2 * have, have + 1))
    if judged.decision is Decision.NOT_REPRODUCED and judged.ran:
        return min(cap, 2 * have)
    return None


def _runs(rate: Rate) -> str:
    return "its one run" if rate.runs == 1 else f"all {rate.runs} runs"


def _fails(row: RunRow) -> str:
    f = failure_rate([row])
    lo, hi = f.ci95
    if f.failures == 0:
        return f"pass {f.runs}/{f.runs} (failure rate 95% CI {round(100 * lo)}–{round(100 * hi)}%)"
    return f"{row.kind} {f.text()}"


# runs per cell that separate n/n from 0/n: below this, unanimous cells cannot rule a knob out
def unanimous_runs() -> int:
    return runs_to_separate(Rate(0, 1), Rate(1, 1)) or 1


@dataclass(frozen=True)
class KnobJudged:
    effect: KnobEffect
    line: str


def _kinds(rows: Sequence[RunRow]) -> set[Kind]:
    return {k for r in rows for k in r.kinds if k not in (Kind.ERROR, Kind.INTERRUPTED)}


def _pair_separated(a: RunRow, b: RunRow) -> bool:
    for kind in _kinds([a, b]):
        ra, rb = kind_rate([a], kind), kind_rate([b], kind)
        if separated(ra, rb) or separated(rb, ra):
            return True
    return False


def _pair_need(a: RunRow, b: RunRow) -> int | None:
    needs = []
    for kind in _kinds([a, b]):
        ra, rb = kind_rate([a], kind), kind_rate([b], kind)
        low, high = (ra, rb) if ra.value <= rb.value else (rb, ra)
        if (n := runs_to_separate(low, high)) is not None:
            needs.append(n)
    return min(needs) if needs else None


def judge_knob(label: str, groups: Sequence[Sequence[RunRow]], shown: str) -> KnobJudged:
    """One knob over its groups (the cells that differ only in this knob)."""
    groups = [[r for r in g if ran([r])] for g in groups]
    groups = [g for g in groups if g]
    if not groups:
        return KnobJudged(KnobEffect.NOT_JUDGED, f"{label}: not judged (no cell ran)")
    pairs = [(a, b) for g in groups for i, a in enumerate(g) for b in g[i + 1 :]]
    if not pairs:
        return KnobJudged(KnobEffect.NOT_JUDGED, f"{label}: not judged (one value ran: {shown})")
    if any(_pair_separated(a, b) for a, b in pairs):
        return KnobJudged(KnobEffect.CHANGES, f"{label} changes the outcome ({shown})")
    enough = unanimous_runs()
    alike = all(
        len(_kinds(g)) == 1
        and all(len(r.kinds) == 1 for r in g)
        and min(ran([r]) for r in g) >= enough
        for g in groups
    )
    if alike:
        # what "ruled out" excludes: a value that changed the verdict in a share q of its runs
        # shows in n runs with probability 1 - (1 - q)^n, 95% or more from q = 1 - 0.05^(1/n)
        fewest = min(ran([r]) for g in groups for r in g)
        shows = 1 - 0.05 ** (1 / fewest)
        return KnobJudged(
            KnobEffect.RULED_OUT,
            f"{label} is ruled out: the same verdict in every run of every value ({shown}); "
            f"with {fewest} runs per cell, a value changing it in {round(100 * shows)}% of "
            "runs or more would have shown (95%)",
        )
    needs = [n for a, b in pairs if (n := _pair_need(a, b)) is not None]
    runs = min(ran([r]) for g in groups for r in g)
    if needs:
        tail = f"about {min(needs)} runs per cell would settle it at the rates seen"
    else:
        tail = (
            f"no difference seen in {runs} run(s) per cell; {enough} runs per cell of one "
            "verdict each would rule it out"
        )
    return KnobJudged(KnobEffect.UNSETTLED, f"{label} is unsettled ({shown}): {tail}")


def failures_text(rows: Sequence[RunRow]) -> str:
    """A value's outcome in a knob's line: `hang/pass` over single runs, else the runs by
    kind (`hang 5/8, pass 3/8`)."""
    counts: dict[Kind, int] = {}
    for r in rows:
        for kind, n in r.kinds.items():
            counts[kind] = counts.get(kind, 0) + n
    total = sum(counts.values())
    if total == len(rows):
        return "/".join(sorted(counts))
    return ", ".join(f"{k} {n}/{total}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
