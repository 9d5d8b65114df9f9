"""Triage's Explain step: what the first failing run's report says (verdict, location,
causes, who waits for whom, blame) and the doctor facts that bear on its top cause."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.causes import Rule, shipped_rules
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.report.load import load_report
from harness.report.model import plain
from harness.triage.model import Step
from harness.triage.steps import Context
from harness.vocab import StepStatus, TriageStep

# --------------------------------------------------------------------------------- Explain


def explain(ctx: Context) -> Step:
    """What the first failing run's report says, and the doctor facts on its top cause."""
    step = Step(TriageStep.EXPLAIN)
    first = ctx.result.step(TriageStep.REPRODUCE).result.get("first_failure")
    if not first:
        step.status, step.reason = StepStatus.SKIPPED, "nothing reproduced to explain"
        return step
    folder = ctx.result.directory / str(first)
    step.result = explain_report(folder, ctx.pin, min(10.0, max(2.0, ctx.left())))
    step.result["folder"] = first
    step.result["report"] = first  # the run the story's Where and Why link to
    step.runs.append(str(first))
    step.status = StepStatus.DONE
    causes = step.result.get("causes") or []
    where = f" in {step.result['location']}" if step.result.get("location") else ""
    why = f": {causes[0]['id']}" if causes else ": no cause named"
    step.headline = f"{step.result.get('kind')}{where}{why}"
    return step


def rule_of(pin: Pin, cause: str | None) -> Rule | None:
    """The rule behind a cause id: the pin's own first, then the shipped ones."""
    if not cause:
        return None
    return next((r for r in (*pin.causes, *shipped_rules()) if r.id == cause), None)


def _probes_for(cause: str) -> list[tuple[str, Callable[..., Any]]]:
    """The doctor probes that bear on a cause (run in-process, each under its timeout)."""
    from harness.doctor import openmp

    table = {
        "openmp-after-fork": [
            ("openmp-after-fork", openmp.probe_openmp_fork),
            ("openmp", openmp.probe_openmp),
        ],
    }
    return table.get(cause, [])


def doctor_facts(cause: str | None, timeout_s: float) -> list[dict[str, Any]]:
    from harness.doctor.model import ProbeContext, guarded

    if not cause:
        return []
    ctx = ProbeContext.make(timeout_s, None)
    found = []
    for name, fn in _probes_for(cause):
        p = guarded(name, fn, ctx)
        found.append({"name": name, "status": str(p.status), "detail": p.detail, "hint": p.hint})
    return found


def explain_report(folder: Path, pin: Pin, timeout_s: float) -> dict[str, Any]:
    """What one run's report says about why it failed (no new runs), with the doctor facts
    on its top cause."""
    report = load_report(folder)
    v = report.verdict
    if v is None:
        raise HarnessError(f"{folder}: the report has no verdict to explain")
    causes = []
    for c in v.causes:
        causes.append(
            {
                "id": c.id,
                "title": c.id,  # a rule has no title of its own: its id names it
                "confidence": str(c.confidence),
                "sentence": c.sentence,
                "remedies": list(c.remedies),
                "command": c.command,
            }
        )
    top = v.causes[0].id if v.causes else None
    return {
        "kind": str(v.kind),
        "summary": v.summary,
        "mechanism": str(v.mechanism) if v.mechanism else None,
        "location": v.location,
        "location_frames": list(v.location_frames),
        "evidence": list(v.evidence[:8]),
        "causes": causes,
        "waits": [v.waits_for] if v.waits_for else [],
        "blame": plain(v.blame) if v.blame is not None else None,
        "blame_skipped": v.blame_skipped,
        "doctor": doctor_facts(top, timeout_s),
    }
