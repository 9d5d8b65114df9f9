"""Say why, not only where: cause rules (harness/data/causes.toml and a pin's [[causes]])
evaluated over what a run left. Each rule names a detector, which looks at the evidence
(verdict, stacks, process lineage and exit statuses from the watch loop, lock owners, the
output) and returns one match per finding with the fields its sentence and remedies use.
Detectors are code; which of them apply, to which verdicts, and what is said and tried is
data, so a new cause of a known shape is a TOML entry.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from harness.analysis.detectors import DETECTORS, Facts
from harness.errors import HarnessError
from harness.outcome import USAGE

CONFIDENCE = ("high", "medium", "low")


@dataclass
class Cause:
    id: str
    sentence: str
    confidence: str
    evidence: list[str] = field(default_factory=list)
    remedies: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    id: str
    detector: str
    kinds: tuple[str, ...]
    sentence: str
    confidence: str = "medium"
    mechanisms: tuple[str, ...] = ()
    remedies: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- rules as data


def rule_from_table(table: Mapping[str, Any], where: str) -> Rule:
    try:
        rule = Rule(
            id=str(table["id"]),
            detector=str(table["detector"]),
            kinds=tuple(str(k) for k in table["kinds"]),
            sentence=str(table["sentence"]),
            confidence=str(table.get("confidence", "medium")),
            mechanisms=tuple(str(m) for m in table.get("mechanisms", ())),
            remedies=tuple(str(r) for r in table.get("remedies", ())),
            params=dict(table.get("params", {})),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HarnessError(f"{where}: bad [[causes]] entry: missing or bad {exc}", USAGE) from exc
    if rule.detector not in DETECTORS:
        known = ", ".join(DETECTORS)
        raise HarnessError(
            f"{where}: cause {rule.id}: unknown detector {rule.detector!r} ({known})"
        )
    if rule.confidence not in CONFIDENCE:
        raise HarnessError(f"{where}: cause {rule.id}: confidence must be high, medium or low")
    patterns: list[object] = []
    if rule.detector == "output":
        if "regex" not in rule.params:
            raise HarnessError(f"{where}: cause {rule.id}: detector output needs params.regex")
        patterns = [rule.params["regex"]]
    elif rule.detector == "frames":
        patterns = list(rule.params.get("functions", ()))
    for pattern in patterns:
        try:
            re.compile(str(pattern))
        except re.error as exc:
            raise HarnessError(f"{where}: cause {rule.id}: bad regex: {exc}", USAGE) from exc
    for text in (rule.sentence, *rule.remedies):
        try:  # a template must format: `{field}` only (no positional or format specs)
            text.format_map(_Fields())
        except (IndexError, ValueError, KeyError, AttributeError) as exc:
            raise HarnessError(
                f"{where}: cause {rule.id}: bad template {text!r}: {exc}", USAGE
            ) from exc
    return rule


def load_rules(own: Iterable[Mapping[str, Any]] = ()) -> list[Rule]:
    """A pin's own [[causes]] first, then the shipped ones."""
    text = resources.files("harness").joinpath("data/causes.toml").read_text()
    shipped = tomllib.loads(text).get("causes", [])
    rules = [rule_from_table(t, "pin [[causes]]") for t in own]
    rules += [rule_from_table(t, "causes.toml") for t in shipped]
    return rules


class _Fields(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"  # a template field the detector did not give stays visible


def diagnose(facts: Facts, rules: Sequence[Rule]) -> list[Cause]:
    """Every cause whose rule applies and whose detector finds something, most confident
    first; one cause per (id, sentence)."""
    compare = (
        f"harness compare {facts.env} --variants {facts.variant},{','.join(facts.fixes)}"
        + (f" {facts.compare_args}" if facts.compare_args else "")
        if facts.env and facts.fixes
        else ""
    )
    common = {
        "compare": compare,
        "stacks": str(facts.report_dir / "stacks.txt"),
        "log": str(facts.report_dir / "output.log"),
        "env": facts.env or "",
        "location": facts.location or "",
    }
    causes: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for rule in rules:
        if facts.kind not in rule.kinds:
            continue
        if rule.mechanisms and facts.mechanism not in rule.mechanisms:
            continue
        for match in DETECTORS[rule.detector](facts, rule.params):
            evidence = list(match.pop("evidence", []))
            values = _Fields({**common, **{k: str(v) for k, v in match.items()}})
            sentence = rule.sentence.format_map(values)
            if (rule.id, sentence) in seen:
                continue
            seen.add((rule.id, sentence))
            # a remedy that runs the fix needs a fix to run (a watched command has none)
            remedies = [
                r.format_map(values) for r in rule.remedies if compare or "{compare}" not in r
            ]
            causes.append(
                Cause(rule.id, sentence, rule.confidence, evidence, [r for r in remedies if r])
            )
    causes.sort(key=lambda c: CONFIDENCE.index(c.confidence))
    return causes
