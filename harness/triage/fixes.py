"""Triage's Fixes step: the baseline against the pin's fixes, `--repeat auto`, the fix
confirmed only on separated rates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness import variants
from harness.config.pin import Pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import Kind
from harness.pipeline.compare import compare_variants, default_variants
from harness.pipeline.repeat import (
    Repeat,
    build_each,
)
from harness.report.load import load_report
from harness.report.matrix import write_matrix
from harness.report.repeat import failure_rate, ran
from harness.report.runs import RunRow
from harness.stats import separated
from harness.triage import budget
from harness.triage.model import Step
from harness.triage.results import FixesResult, VariantFact
from harness.triage.steps import Context, builds_made
from harness.vocab import SourceKind, StepStatus, TriageStep, VariantKind

# ----------------------------------------------------------------------------------- Fixes


FETCH_LIMIT_S = 60.0  # the most a `ref:` fix's fetch may take of the budget


def fix_specs(ctx: Context) -> tuple[list[str], list[str]]:
    """The baseline and the pin's fixes to compare, and the fixes left out (with why);
    worked out once per triage (a `ref:` fix may fetch, within FETCH_LIMIT_S and the
    budget left)."""
    if ctx.fix_plan is None:
        ctx.fix_plan = _fix_specs(ctx)
    return ctx.fix_plan


def _fix_specs(ctx: Context) -> tuple[list[str], list[str]]:
    wanted = default_variants(ctx.pin)  # a `ref:` fix is one of the pin's fixes
    keep, left_out = [wanted[0]], []
    for spec in wanted[1:]:
        limit = max(5.0, min(FETCH_LIMIT_S, ctx.left()))
        why = ref_unreachable(ctx.pin, spec, ctx.opts.run.checkout, limit)
        if why is None:
            keep.append(spec)
        else:
            left_out.append(f"{spec}: {why}")
    return keep, left_out


def ref_unreachable(
    pin: Pin, spec: str, checkout: Path | None, timeout: float = FETCH_LIMIT_S
) -> str | None:
    """Why a fix that takes a `ref:` cannot be tried here (None: it can, or has no ref):
    a path source has no refs; a git source's ref must resolve (locally, else fetched
    from the pin's URL, under the fetch's own timeout)."""
    refs = [s.arg for s in variants.parse_variant(spec, pin) if s.kind is VariantKind.REF]
    if not refs:
        return None
    if pin.source.kind is not SourceKind.GIT:
        return f"ref:{refs[0]} needs a git source (pin {pin.name} is a {pin.source.kind} source)"
    from harness.source.git import locate_checkout, resolve_ref

    try:
        root = locate_checkout(pin, checkout)
        for ref in refs:
            resolve_ref(pin, root, ref, timeout)
    except HarnessError as exc:
        return f"not reachable: {exc.message}"
    return None


def fixes(ctx: Context) -> Step:
    """The baseline against the pin's fixes, `--repeat auto` within the budget."""
    step = Step(TriageStep.FIXES)
    specs, left_out = fix_specs(ctx)
    if len(specs) < 2:
        step.status = StepStatus.SKIPPED
        step.reason = f"pin {ctx.pin.name} names no fix to try" + (
            f" ({'; '.join(left_out)})" if left_out else ""
        )
        return step
    run = ctx.base()
    out = ctx.folder(TriageStep.FIXES)
    settings = load_scenario(run.scenario or run.env).settings(ctx.pin.lineage)
    step.builds_made += builds_made(build_each(run, ctx.pin, specs, settings.upstream_env))
    cap = budget.cap_for(ctx.costs, len(specs), ctx.left(), ctx.opts.repeat_cap)
    res = compare_variants(run, specs, out, Repeat(runs=cap, auto=True, jobs=ctx.opts.jobs))
    write_matrix(res.matrix(), out)
    step.runs_made = sum(r.runs for r in res.rows if r.kind is not Kind.ERROR or r.counts)
    base_rate = failure_rate(res.rows[:1])
    confirmed = [r.variant for r in res.rows[1:] if separated(failure_rate([r]), base_rate)]
    fix = confirmed[0] if confirmed and base_rate.failures else None
    fix_text = ""
    if fix:  # its own comparison: "passes" only where it never failed
        fixed = next(r for r in res.rows if r.variant == fix)
        rate = failure_rate([fixed])
        fix_text = (
            f"{fix} passes {rate.runs}/{rate.runs} runs against {base_rate.text()} of "
            f"{res.rows[0].variant}"
            if rate.failures == 0
            else f"{fix} cuts the failures from {base_rate.text()} to {rate.text()}"
        )
    variants_run = tuple(
        VariantFact(
            r.variant,
            r.summary,
            ran([r]),
            dict(r.kinds),
            ctx.rel(r.report_dir),
        )
        for r in res.rows
    )
    step.result = FixesResult(
        folder=ctx.rel(out),
        decision=res.judged.decision,
        confirmed=tuple(confirmed) if fix else (),
        fix_variant=fix,
        fix_text=fix_text,
        variants=variants_run,
        summary=res.why,
        changes=tuple(_changes(res.rows, fix)),
        left_out=tuple(left_out),
        cap=cap,
    )
    step.runs.append(ctx.rel(out) or "")
    step.status = StepStatus.DONE
    step.headline = fix_text or res.why
    return step


def _changes(rows: Sequence[RunRow], fix: str | None) -> list[str]:
    """The confirmed variant's source changes, from the report of one of its runs."""
    row = next((r for r in rows if fix and r.variant == fix), None)
    if row is None or not row.report_dir:
        return []
    folder = Path(row.report_dir)  # a cell: runs/NNN/<report>/report.json
    found = [p.parent for p in sorted(folder.glob(f"runs/*/*/{REPORT_JSON}"))]
    for f in [folder, *found] if (folder / REPORT_JSON).is_file() else found:
        try:
            report = load_report(f)
        except HarnessError:
            continue
        if report.variant is not None:
            return list(report.variant.changes)
    return []
