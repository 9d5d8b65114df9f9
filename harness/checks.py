"""Scenario checks on parsed metrics (keys, bounds, clipping, epochs, finiteness, SPS)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CheckResult:
    name: str
    status: str  # "pass" | "fail" | "skip"
    observed: object = None
    bound: str = ""
    message: str = ""


def run_checks(
    scenario: object, pin: str, frames: list[object], tree: object, verdict: object, steps: int
) -> list[CheckResult]:
    """Placeholder until scenario checks land: no checks configured."""
    return []


def apply_to_verdict(verdict: object, results: list[CheckResult]) -> None:
    return None
