"""The triage's budget (docs/triage.md): how much time it has, what each step is expected to
cost, the order the steps run in, and why a step that does not fit is skipped.

The order is the most informative first:

1. Reproduce: without a failure seen here nothing else means anything, and its runs measure
   what one run costs on this host (every later estimate is made from them). It always
   runs its first round, whatever the budget says.
2. Explain: reads the first failing run's report (no new runs; a doctor probe of a few
   seconds): the kind, the place, the cause and the knobs it suggests, almost free.
3. Fixes: the answer people want first (does the pin's fix end it?) for a few variants'
   runs; a confirmed fix also bounds what Knobs and History can add.
4. Knobs: what does not matter (ruled out) and what does, a sweep of one knob at a time:
   more runs than Fixes for a less direct answer.
5. History: a bisect over commits, each step a build and runs: the most expensive and only
   for git sources.

A step's estimate is its runs times the measured cost of one run (the mean whole time of a
Reproduce run, a child harness from start to report), divided by the runs made at once
(`--jobs`), plus a build for each variant the triage has not built yet when the cache was
cold for the stock build (a warm cache is taken to hold the other variants too). A step
whose estimate is larger than the time left is skipped, with the reason
("needs about 240 s, 90 s left"); later, cheaper steps still run."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.vocab import TriageStep

DEFAULT_BUDGET_S = 900.0  # 15 minutes
ORDER = (
    TriageStep.REPRODUCE,
    TriageStep.EXPLAIN,
    TriageStep.FIXES,
    TriageStep.KNOBS,
    TriageStep.HISTORY,
)
FIRST_ROUND = 4  # runs per cell before a rate is looked at (n/n against 0/n separates at 4)
EXPLAIN_S = 15.0  # reading a report and one doctor probe (its own timeout is 10 s)
DEFAULT_BUILD_S = 30.0  # a cold build before any was measured
HISTORY_STEPS = 6  # a bisect of ~50 commits: log2 steps, each a build and a first round

_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
MAX_BUDGET_S = 7 * 24 * 3600.0


def parse_budget(text: str) -> float:
    """`900`, `90s`, `15m`, `1h30m` → seconds; anything else is a one-line usage error."""
    raw = text.strip().lower()
    seconds: float | None = None
    try:
        seconds = float(raw)
    except ValueError:
        parts = _PART.findall(raw)
        if (
            parts
            and "".join(n + u for n, u in parts) == raw
            and len({u for _, u in parts}) == len(parts)
        ):
            seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise HarnessError(
            f"--budget takes seconds or a duration such as 900, 15m or 1h30m, not {text!r}",
            USAGE,
        )
    if seconds > MAX_BUDGET_S:
        raise HarnessError(f"--budget is at most 7 days, not {text!r}", USAGE)
    return seconds


@dataclass
class Costs:
    """What one run and one build cost on this host, as measured so far."""

    run_s: float  # one child run, start to report
    build_s: float = DEFAULT_BUILD_S  # one cold build
    cache_warm: bool = False  # the stock build was a cache hit
    jobs: int = 1

    def runs(self, n: int) -> float:
        """`n` runs, `jobs` at a time (rounds of `jobs`)."""
        return math.ceil(n / max(1, self.jobs)) * self.run_s

    def builds(self, n: int) -> float:
        return 0.0 if self.cache_warm else n * self.build_s


def first_guess(startup_s: float, stall_s: float, wall_s: float) -> float:
    """One run before any was measured: a hang ends within its startup window and the
    stacks, a pass within the wall limit; the smaller of the startup window plus a stall
    window and the wall, plus the child harness's own start and report (a few seconds)."""
    return min(wall_s, startup_s + stall_s) + 5.0


def estimate_reproduce(costs: Costs) -> float:
    return costs.runs(FIRST_ROUND) + costs.builds(1)


def estimate_explain() -> float:
    return EXPLAIN_S


def estimate_fixes(costs: Costs, variants: int, new_builds: int) -> float:
    """The first round of every variant (baseline and fixes)."""
    return costs.runs(FIRST_ROUND * variants) + costs.builds(new_builds)


def estimate_knobs(costs: Costs, cells: int, new_builds: int) -> float:
    """The first round of every cell (one cell per value of each knob; the default value
    is Reproduce's runs)."""
    return costs.runs(FIRST_ROUND * cells) + costs.builds(new_builds)


def estimate_history(costs: Costs) -> float:
    """A bisect of a few steps, each a build and a first round."""
    return HISTORY_STEPS * (costs.runs(FIRST_ROUND) + costs.builds(1))


def cap_for(costs: Costs, cells: int, left_s: float, cap: int) -> int:
    """The most runs per cell that fit in `left_s` (at least the first round, at most
    `cap`): `--repeat auto` goes on only while the budget allows."""
    if cells <= 0 or costs.run_s <= 0:
        return cap
    rounds = int(left_s // costs.run_s)
    fit = rounds * max(1, costs.jobs) // cells
    return max(min(FIRST_ROUND, cap), min(cap, fit))


def skip_reason(estimate_s: float, left_s: float) -> str | None:
    """Why a step of this estimate does not fit in the time left; None when it fits."""
    if estimate_s <= left_s:
        return None
    return f"needs about {estimate_s:.0f} s, {max(0.0, left_s):.0f} s left"


def shown(estimate_s: float | None) -> str:
    """The estimate in the live progress line."""
    return "estimate unknown" if estimate_s is None else f"about {estimate_s:.0f} s"
