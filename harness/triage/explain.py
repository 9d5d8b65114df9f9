"""Triage's Explain step: what the first failing run's report says (verdict, location,
causes, who waits for whom, blame) and the doctor facts that bear on its top cause."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.config.causes import Rule, shipped_rules
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.report.load import load_report
from harness.triage.model import Step
from harness.triage.results import CauseFact, ExplainResult, ProbeFact, ReproduceResult
from harness.triage.steps import Context
from harness.vocab import StepStatus, TriageStep

# --------------------------------------------------------------------------------- Explain


def explain(ctx: Context) -> Step:
    """What the first failing run's report says, and the doctor facts on its top cause."""
    step = Step(TriageStep.EXPLAIN)
    first = ctx.result.found(ReproduceResult).first_failure
    if not first:
        step.status, step.reason = StepStatus.SKIPPED, "nothing reproduced to explain"
        return step
    folder = ctx.result.directory / first
    found = explain_report(folder, ctx.pin, min(10.0, max(2.0, ctx.left())))
    # the run the story's Where and Why link to
    step.result = found = replace(found, folder=first, report=first)
    step.runs.append(first)
    step.status = StepStatus.DONE
    where = f" in {found.location}" if found.location else ""
    why = f": {found.causes[0].id}" if found.causes else ": no cause named"
    step.headline = f"{found.kind}{where}{why}"
    return step


def rule_of(pin: Pin, cause: str | None) -> Rule | None:
    """The rule behind a cause id: the pin's own first, then the shipped ones."""
    if not cause:
        return None
    return next((r for r in (*pin.causes, *shipped_rules()) if r.id == cause), None)


def doctor_facts(rule: Rule | None, timeout_s: float) -> tuple[ProbeFact, ...]:
    """The doctor probes the rule names (its `doctor`), run in-process, each under its
    timeout; a name that is not a probe is the rule's one-line error."""
    from harness.doctor import run_probes

    if rule is None or not rule.doctor:
        return ()
    try:
        probes = run_probes(rule.doctor, timeout_s)
    except ValueError as exc:
        raise rule.fail(f"doctor: {exc}") from None
    return tuple(ProbeFact(p.name, p.status, p.detail, p.hint) for p in probes)


def explain_report(folder: Path, pin: Pin, timeout_s: float) -> ExplainResult:
    """What one run's report says about why it failed (no new runs), with the doctor facts
    on its top cause."""
    report = load_report(folder)
    v = report.verdict
    if v is None:
        raise HarnessError(f"{folder}: the report has no verdict to explain")
    causes = tuple(
        # a rule has no title of its own: its id names it
        CauseFact(c.id, c.id, c.confidence, c.sentence, tuple(c.remedies), c.command)
        for c in v.causes
    )
    top = v.causes[0].id if v.causes else None
    return ExplainResult(
        kind=v.kind,
        summary=v.summary,
        mechanism=v.mechanism,
        location=v.location,
        location_frames=tuple(v.location_frames),
        evidence=tuple(v.evidence[:8]),
        causes=causes,
        waits=(v.waits_for,) if v.waits_for else (),
        blame=v.blame,
        blame_skipped=v.blame_skipped,
        doctor=doctor_facts(rule_of(pin, top), timeout_s),
    )
