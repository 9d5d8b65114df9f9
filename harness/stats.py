"""Rates of repeated runs and the decisions taken on them (docs/repeat.md states the rules).

A hang that shows in a quarter of the runs passes three runs in a row 42% of the time, so a
decision on runs is taken on intervals, never on counts alone:

- a rate is `failures/runs` with its 95% Wilson score interval (well behaved at 0/n and n/n,
  where the normal approximation collapses to a point);
- two rates are *separated* when the upper bound of the lower one is below the lower bound
  of the higher one. `compare` confirms a fix, and `sweep` says a knob changes the outcome,
  only on separated rates;
- a bisect step is clean only when its clean runs make a failure rate as high as the one
  seen at the bad end implausible: a commit failing at that rate would have failed in one
  of them with 95% probability.

Pure arithmetic: nothing here runs anything."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95%: the normal quantile at 0.975
MAX_RUNS = 1000  # the most runs a "how many would settle it" estimate considers


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"{k} of {n} runs")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at the ends the bound is exact; rounding must not put 0/n's lower bound above 0
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


@dataclass(frozen=True)
class Rate:
    """`failures` of `runs` runs, with its 95% interval."""

    failures: int
    runs: int

    @property
    def value(self) -> float:
        return self.failures / self.runs if self.runs else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        return wilson(self.failures, self.runs)

    def text(self) -> str:
        """`7/30 (23%, 95% CI 12–41%)`."""
        lo, hi = self.ci95
        return f"{self.failures}/{self.runs} ({pct(self.value)}, 95% CI {pct(lo, '')}–{pct(hi)})"


def pct(x: float, sign: str = "%") -> str:
    return f"{round(100 * x)}{sign}"


def separated(low: Rate, high: Rate) -> bool:
    """Whether `low` is surely below `high`: its upper bound under `high`'s lower bound."""
    return low.runs > 0 and high.runs > 0 and low.ci95[1] < high.ci95[0]


def runs_to_separate(low: Rate, high: Rate, cap: int = MAX_RUNS) -> int | None:
    """The fewest runs per side that would separate the two rates if the rates seen so far
    held (at least as many as either side has now); None when no number up to `cap` would:
    `low` is not below `high`, or nothing has run."""
    if low.runs == 0 or high.runs == 0 or low.value >= high.value:
        return None
    for m in range(max(low.runs, high.runs, 1), cap + 1):
        a = Rate(round(low.value * m), m)
        b = Rate(round(high.value * m), m)
        if separated(a, b):
            return m
    return None


def clean_runs_needed(bad_rate: float, cap: int = MAX_RUNS) -> int | None:
    """The fewest clean runs (0 failures) after which a commit failing at `bad_rate` (the
    rate seen at the bad end of a bisect) would have failed at least once with 95%
    probability: miss_chance below 5% (the exact one-sided bound of 0/n, 1 - 0.05^(1/n),
    under `bad_rate`). None when `bad_rate` is 0 or more than `cap` runs would be needed."""
    if bad_rate <= 0:
        return None
    if bad_rate >= 1:
        return 1
    n = math.ceil(math.log(0.05) / math.log(1.0 - bad_rate))
    while miss_chance(n, bad_rate) >= 0.05:  # rounding at the boundary
        n += 1
    return n if n <= cap else None


def miss_chance(clean: int, bad_rate: float) -> float:
    """The chance that a commit failing at `bad_rate` passes `clean` runs in a row: how likely
    a step called clean is bad after all."""
    return (1.0 - bad_rate) ** clean
