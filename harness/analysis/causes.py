"""Say why, not only where: cause rules (harness/data/causes.toml and a pin's [[causes]],
parsed in `harness.config.causes`) evaluated over what a run left. This is where rules meet
detectors (`harness.analysis.detectors`): `check` refuses a rule whose detector is unknown or
whose params or template fields its detector does not declare, before any run starts; then
`diagnose` runs each applicable rule's detector and fills its templates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.detectors import DETECTORS, Detector, run
from harness.config.causes import (
    Fields,
    Rule,
    bind_params,
    shipped_rules,
    template_fields,
)
from harness.filenames import OUTPUT_LOG, STACKS_TXT
from harness.outcome import Kind
from harness.sampling.model import SampleSet
from harness.vocab import Confidence, Mechanism

# the fields every rule's templates may use besides its detector's (values in `diagnose`)
COMMON_FIELDS = ("compare", "stacks", "log", "env", "location")
_ORDER = tuple(Confidence)


@dataclass
class Cause:
    id: str
    sentence: str
    confidence: Confidence
    evidence: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)
    # the one harness command to try for this cause (the rule's `command`); "" when none
    command: str = ""


@dataclass(frozen=True)
class Checked:
    """A rule with its detector and its params as the detector's params class."""

    rule: Rule
    detector: Detector[Any]
    params: Any


def check(rule: Rule) -> Checked:
    """The rule against its detector's declaration; a one-line usage error when it names
    an unknown detector, params the detector does not take (or lacks one it needs), bad
    param values, or template fields neither the detector nor the common ones give."""
    found = DETECTORS.get(rule.detector)
    if found is None:
        known = ", ".join(sorted(DETECTORS))
        raise rule.fail(f"unknown detector {rule.detector!r} (known: {known})")
    params = bind_params(rule, found.params, found.name)
    allowed = found.fields_with(params) | set(COMMON_FIELDS)
    for text in rule.templates:
        stray = sorted(template_fields(text) - allowed)
        if stray:
            raise rule.fail(
                f"{{{stray[0]}}} in {text!r} is not a field of detector {found.name} "
                f"(it gives: {', '.join(sorted(allowed))})"
            )
    return Checked(rule, found, params)


def checked_rules(own: Sequence[Rule] = ()) -> list[Checked]:
    """A pin's own rules (`Pin.causes`, already in extends order) first, then the shipped
    ones, each checked against its detector. Call it before a run: a bad rule fails then."""
    return [check(r) for r in (*own, *shipped_rules())]


@dataclass(frozen=True)
class Facts:
    """What a run left, and what the templates' common fields are made of."""

    kind: Kind
    mechanism: Mechanism | None
    location: str | None
    samples: SampleSet | None
    output_tail: Sequence[str]
    env: str | None = None
    # the harness command that tests the reported fix on this run ({compare}); "" when the
    # pin knows of no fix (or there is no pin: a watched command)
    compare: str = ""
    report_dir: Path = Path(".")
    # the functions of the located frames (`Popen.communicate`): a remedy that recommends
    # the very call the program is stuck in is no remedy (`advises_stuck_call`)
    stuck_in: Sequence[str] = ()


def advises_stuck_call(remedy: str, stuck_in: Sequence[str]) -> str | None:
    """The call of the located frames a remedy recommends as the way out (`use
    Popen.communicate() instead of wait()` to a program stuck in Popen.communicate), or
    None. A call with arguments (`communicate(timeout=...)`) is another call, and one the
    remedy advises against (`instead of wait()`) is no advice to make it."""
    for name in stuck_in:
        short = name.rsplit(".", 1)[-1]
        if not short.isidentifier():
            continue
        for m in re.finditer(rf"(?<!\w){re.escape(short)}\(\)", remedy):
            before = remedy[: m.start()].rstrip("`.").removesuffix(name.rsplit(".", 1)[0])
            if not re.search(r"(instead of|rather than|not|than|avoid)\s*[`]?$", before):
                return name
    return None


def diagnose(facts: Facts, rules: Sequence[Checked]) -> list[Cause]:
    """Every cause whose rule applies and whose detector finds something, most confident
    first; one cause per (id, sentence). The fallback rules (the wake graph's readings) are
    read only when no other rule found a cause, and then only the first that finds one: a
    named cause is the more specific reading of the same graph."""
    found = _diagnose(facts, [c for c in rules if not c.rule.fallback])
    if found:
        return found
    for checked in rules:
        if checked.rule.fallback:
            found = _diagnose(facts, [checked])
            if found:
                return found[:1]
    return []


def _diagnose(facts: Facts, rules: Sequence[Checked]) -> list[Cause]:
    common = {
        "compare": facts.compare,
        "stacks": str(facts.report_dir / STACKS_TXT),
        "log": str(facts.report_dir / OUTPUT_LOG),
        "env": facts.env or "",
        "location": facts.location or "",
    }
    causes: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for checked in rules:
        rule = checked.rule
        if facts.kind not in rule.kinds:
            continue
        if rule.mechanisms and facts.mechanism not in rule.mechanisms:
            continue
        for found in run(checked.detector, checked.params, facts.samples, facts.output_tail):
            values = Fields({**common, **found.fields})
            sentence = rule.sentence.format_map(values)
            if (rule.id, sentence) in seen:
                continue
            seen.add((rule.id, sentence))
            # a template that runs the fix needs a fix to run (a watched command has none)
            usable = [
                t for t in (*rule.remedies, rule.command) if facts.compare or "{compare}" not in t
            ]
            filled = {t: t.format_map(values) for t in usable}
            evidence = list(found.evidence)
            remedies = []
            for r in rule.remedies:
                text = filled.get(r)
                stuck = advises_stuck_call(text, facts.stuck_in) if text else None
                if stuck is not None:
                    evidence.append(
                        f"a remedy left out: it advises {stuck}, where the run is stuck"
                    )
                elif text:
                    remedies.append(text)
            causes.append(
                Cause(
                    rule.id,
                    sentence,
                    rule.confidence,
                    evidence,
                    remedies,
                    filled.get(rule.command, ""),
                )
            )
    causes.sort(key=lambda c: _ORDER.index(c.confidence))
    return causes
