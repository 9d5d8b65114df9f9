"""Triage's Knobs step: each knob of the pin's [triage] table and of the top cause swept
alone against Reproduce's runs, judged changes / ruled out / unsettled on rates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from harness.config.defaults import compare_baseline
from harness.config.pin import Pin
from harness.outcome import Kind
from harness.pipeline.decide import failures_text, judge_knob
from harness.pipeline.repeat import (
    Repeat,
)
from harness.pipeline.sweep import Knob, SweepResult, conclude, run_sweep
from harness.report.matrix import write_matrix
from harness.report.runs import RunRow
from harness.triage import budget
from harness.triage.explain import rule_of
from harness.triage.model import Step
from harness.triage.results import KnobFact, KnobsResult, ReproduceResult
from harness.triage.steps import DEFAULT, Context, builds_made
from harness.vocab import AxisKind, KnobEffect, StepStatus, TriageStep

# ----------------------------------------------------------------------------------- Knobs


def knobs(ctx: Context) -> Step:
    """Each knob swept alone, its default value being Reproduce's runs (no override), and
    judged by pipeline/decide.judge_knob: changes the outcome, ruled out, or unsettled."""
    step = Step(TriageStep.KNOBS)
    baseline = _baseline_row(ctx)
    out_all = ctx.folder(TriageStep.KNOBS)
    found: list[KnobFact] = []
    lines: list[str] = []
    for i, knob in enumerate(ctx.knobs):
        out = out_all / f"{i:02d}"
        ctx.progress.phase(TriageStep.KNOBS, f"{knob.label} = {','.join(knob.values)}")
        swept = run_sweep(ctx.base(), [knob], out, Repeat(budget.FIRST_ROUND, jobs=ctx.opts.jobs))
        step.builds_made += builds_made(swept.builds)
        step.runs_made += sum(r.runs for r in swept.rows if r.kind is not Kind.ERROR or r.counts)
        with_default = Knob(knob.kind, knob.name, (DEFAULT, *knob.values))
        base_row = replace(baseline, values={knob.label: DEFAULT})
        rows = [base_row, *swept.rows]
        table = SweepResult(swept.env, [with_default], rows, out, swept.builds)
        table.conclusion = conclude([with_default], rows)
        write_matrix(table.matrix(), out)
        judged = _judge(knob.label, rows)
        found.append(
            KnobFact(
                knob.label,
                knob.kind,
                knob.name,
                tuple(knob.values),
                judged.effect,
                judged.line,
                ctx.rel(out),
            )
        )
        lines.append(judged.line)
        step.runs.append(ctx.rel(out) or "")
    by_effect: dict[KnobEffect, list[str]] = {}
    for k in found:
        by_effect.setdefault(k.effect, []).append(k.label)
    said = "; ".join(f"{_EFFECT[e]}: {', '.join(ls)}" for e, ls in by_effect.items())
    step.result = KnobsResult(ctx.rel(out_all), tuple(found), tuple(lines), said)
    step.status = StepStatus.DONE
    step.headline = said
    return step


_EFFECT = {
    KnobEffect.CHANGES: "changes the outcome",
    KnobEffect.RULED_OUT: "ruled out",
    KnobEffect.UNSETTLED: "unsettled",
    KnobEffect.NOT_JUDGED: "not judged",
}


def _judge(label: str, rows: Sequence[RunRow]) -> Any:
    """sweep.conclude's judgement of one knob (one group: the only knob varies)."""
    usable = [r for r in rows if not (r.kind is Kind.ERROR and not r.counts)]
    by_value: dict[str, list[RunRow]] = {}
    for r in usable:
        by_value.setdefault(r.values[label], []).append(r)
    shown = "; ".join(f"{v} → {failures_text(rs)}" for v, rs in by_value.items())
    return judge_knob(label, [usable], shown)


def _baseline_row(ctx: Context) -> RunRow:
    """Reproduce's runs as one row (what the default value of every knob did)."""
    r = ctx.result.found(ReproduceResult)
    counts = dict(r.counts)
    return RunRow(
        variant=r.variant or compare_baseline(),
        kind=r.kind or Kind.ERROR,
        mechanism=r.mechanism,
        location=r.location,
        cause=r.cause,
        summary=r.summary,
        report_dir=str(ctx.result.directory / (r.folder or "")),
        runs=sum(counts.values()),
        counts=counts,
    )


def knobs_of(pin: Pin, top_cause: str | None) -> list[Knob]:
    """The pin's triage knobs, then those of the top cause's rule, one per label."""
    declared = list(pin.triage.knobs)
    rule = rule_of(pin, top_cause)
    if rule is not None:
        declared += list(rule.knobs)
    out: dict[str, Knob] = {}
    for k in declared:
        knob = Knob(AxisKind(k.kind), str(k.name).lstrip("-"), tuple(str(v) for v in k.values))
        out.setdefault(knob.label, knob)
    return list(out.values())
