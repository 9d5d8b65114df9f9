"""What each triage step found, one frozen dataclass a step (docs/triage.md, "result keys").

The steps build them (triage/steps.py, explain.py, knobs.py, fixes.py, history.py); the
story reads their fields (story_html, story_issue); triage.json holds `to_json` of each and
`--resume` reads it back through pydantic (`read_result`): a value of the wrong type is a
ValueError that names its key, a key the file lacks takes its default. Every field has a
default, because a step that stopped early (a budget, an interrupt) records what it learned
so far, and a reader says "not known" where a value is None or empty."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from harness.outcome import Kind
from harness.report.model import plain
from harness.report.parsing import parse
from harness.source.blame import HangBlame
from harness.vocab import (
    AxisKind,
    BisectClass,
    BisectStatus,
    Confidence,
    Decision,
    DoctorStatus,
    HistoryEnd,
    KnobEffect,
    Mechanism,
    TriageStep,
)

# what a damaged triage.json must not get past (read back by pydantic on --resume)
Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


@dataclass(frozen=True)
class TriedHost:
    """A host profile Reproduce tried when the failure did not show here."""

    host: str | None = None  # None: this host as it is
    summary: str = ""


@dataclass(frozen=True)
class HazardSeen:
    """A hazard the runs recorded (--hazards), with how many runs showed it."""

    kind: str = ""
    where: str = ""
    trigger: str = ""  # the function History bisects for when nothing failed
    summary: str = ""
    runs: Count = 0


@dataclass(frozen=True)
class ReproduceResult:
    variant: str = ""
    host: str | None = None  # the host profile it failed under; None: this host as it is
    runs: Count | None = None
    counts: dict[Kind, Count] = field(default_factory=dict)  # runs by verdict kind
    failures: Count | None = None
    ran: Count | None = None
    failure_rate: Fraction | None = None
    failure_rate_ci95: tuple[Fraction, Fraction] | None = None
    summary: str = ""
    kind: Kind | None = None
    mechanism: Mechanism | None = None
    location: str | None = None
    cause: str | None = None
    folder: str | None = None  # the repeated runs (repeat.json, index.html)
    first_failure: str | None = None  # the first failing run's folder
    tried_hosts: tuple[TriedHost, ...] = ()
    hazards: tuple[HazardSeen, ...] = ()
    # what the budget reads on --resume
    run_s: Seconds | None = None
    build_s: Seconds | None = None
    cache_warm: bool | None = None


@dataclass(frozen=True)
class CauseFact:
    id: str = ""
    title: str = ""
    confidence: Confidence | None = None
    sentence: str = ""
    remedies: tuple[str, ...] = ()
    command: str = ""


@dataclass(frozen=True)
class ProbeFact:
    """A doctor probe that bears on the top cause, run during Explain."""

    name: str = ""
    status: DoctorStatus = DoctorStatus.SKIP
    detail: str = ""
    hint: str = ""


@dataclass(frozen=True)
class ExplainResult:
    report: str | None = None  # the run explained (its folder)
    folder: str | None = None
    kind: Kind | None = None
    summary: str = ""
    mechanism: Mechanism | None = None
    location: str | None = None
    location_frames: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    causes: tuple[CauseFact, ...] = ()  # the top first
    waits: tuple[str, ...] = ()  # who waits for whom, a line each
    blame: HangBlame | None = None
    blame_skipped: str = ""
    doctor: tuple[ProbeFact, ...] = ()


@dataclass(frozen=True)
class KnobFact:
    label: str = ""
    kind: AxisKind | None = None
    name: str = ""
    values: tuple[str, ...] = ()
    effect: KnobEffect = KnobEffect.NOT_JUDGED
    line: str = ""  # what the runs say
    folder: str | None = None


@dataclass(frozen=True)
class KnobsResult:
    folder: str | None = None  # the sweeps
    knobs: tuple[KnobFact, ...] = ()
    lines: tuple[str, ...] = ()
    conclusion: str = ""


@dataclass(frozen=True)
class VariantFact:
    variant: str = ""
    summary: str = ""
    runs: Count | None = None
    kinds: dict[Kind, Count] = field(default_factory=dict)
    folder: str | None = None


@dataclass(frozen=True)
class FixesResult:
    folder: str | None = None  # the compare
    decision: Decision | None = None
    confirmed: tuple[str, ...] = ()  # the fixes separated below the baseline
    fix_variant: str | None = None  # the first of them
    fix_text: str = ""  # its own comparison
    variants: tuple[VariantFact, ...] = ()
    summary: str = ""
    changes: tuple[str, ...] = ()  # the confirmed variant's source changes
    left_out: tuple[str, ...] = ()  # `ref:` fixes that could not be fetched, with why
    cap: Count | None = None


@dataclass(frozen=True)
class SearchedCommit:
    sha: str = ""
    classification: BisectClass | None = None
    how: str = ""
    back: Count | None = None  # commits back from the bad end


@dataclass(frozen=True)
class FirstBad:
    sha: str = ""
    subject: str = ""
    author: str = ""
    date: str = ""
    diffstat: str = ""
    blame: HangBlame | None = None


@dataclass(frozen=True)
class HistoryResult:
    expect: str = ""  # the failure sought: "hang in env_start"
    repeat: int | str | None = None  # 1, or "auto"
    bad: str | None = None
    good: str | None = None
    good_how: str = ""  # "given", "known_good ref …", "searched back N commits"
    searched: tuple[SearchedCommit, ...] = ()
    status: BisectStatus | HistoryEnd | None = None
    first_bad: FirstBad | None = None
    possible: tuple[str, ...] = ()  # the candidates when it could not be narrowed to one
    folder: str | None = None  # the bisect
    confidence: Fraction | None = None


StepResult = ReproduceResult | ExplainResult | KnobsResult | FixesResult | HistoryResult
RESULTS: dict[TriageStep, type[Any]] = {
    TriageStep.REPRODUCE: ReproduceResult,
    TriageStep.EXPLAIN: ExplainResult,
    TriageStep.KNOBS: KnobsResult,
    TriageStep.FIXES: FixesResult,
    TriageStep.HISTORY: HistoryResult,
}


def result_json(result: StepResult | None) -> dict[str, Any]:
    """A result as triage.json holds it (`{}` for a step that found nothing)."""
    data: dict[str, Any] = {} if result is None else plain(result)
    return data


def read_result(name: TriageStep, data: object) -> StepResult | None:
    """A step's result read back from triage.json; a ValueError naming the first bad key."""
    if data is None or data == {}:
        return None
    try:
        found: StepResult = parse(RESULTS[name], data, "result")
    except ValueError as exc:
        raise ValueError(f"step {name}: {exc}") from None
    return found
