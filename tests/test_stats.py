"""The rates and the decision rules (harness/stats.py, pipeline/decide.py), checked against
known values and against simulated Bernoulli outcomes with known rates: the interval covers
the true rate about 95% of the time, a "fix" that fails as often as the baseline is almost
never confirmed, a real fix is confirmed once enough runs are in, and a bisect step called
clean under the rule is rarely bad."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from harness.outcome import Kind
from harness.pipeline.decide import judge_compare, next_round
from harness.report.runs import RunRow
from harness.stats import (
    Rate,
    clean_runs_needed,
    miss_chance,
    runs_to_separate,
    separated,
    wilson,
)
from harness.vocab import Decision


def test_known_values() -> None:
    assert Rate(7, 30).text() == "7/30 (23%, 95% CI 12–41%)"  # the example
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and abs(hi - 0.2775) < 1e-3
    assert wilson(10, 10)[1] == 1.0 and abs(wilson(10, 10)[0] - 0.7225) < 1e-3
    assert wilson(0, 0) == (0.0, 1.0)
    # n/n against 0/n separates from 4 runs each at 95%, not from 3
    assert not separated(Rate(0, 3), Rate(3, 3)) and separated(Rate(0, 4), Rate(4, 4))
    assert runs_to_separate(Rate(0, 1), Rate(1, 1)) == 4
    assert runs_to_separate(Rate(1, 4), Rate(1, 4)) is None  # equal rates never separate
    assert clean_runs_needed(1.0) == 1 and clean_runs_needed(0.0) is None
    assert clean_runs_needed(0.25) == 11  # 0.75^11 = 4.2%: a 25% failure shows in 11 runs
    assert abs(miss_chance(3, 0.25) - 0.421875) < 1e-9  # passes three in a row 42% of the time


@given(st.integers(1, 400).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_the_interval_holds_its_estimate(kn: tuple[int, int]) -> None:
    k, n = kn
    lo, hi = wilson(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    # symmetric: failures and passes swap ends
    lo2, hi2 = wilson(n - k, n)
    assert abs(lo - (1 - hi2)) < 1e-9 and abs(hi - (1 - lo2)) < 1e-9
    if k < n:  # one more failure never lowers either bound
        up = wilson(k + 1, n)
        assert up[0] >= lo and up[1] >= hi


def test_coverage_on_simulated_runs() -> None:
    """For known rates and run counts, the 95% interval contains the true rate in 2,000
    simulated repeats: about 95% on average over the grid, and never under 90% (Wilson's
    coverage dips under the nominal level where n·p is small: Brown, Cai and DasGupta,
    "Interval Estimation for a Binomial Proportion", 2001; 92% measured at p=0.05, n=10)."""
    rng = random.Random(19)
    shares = []
    for p in (0.05, 0.25, 0.5, 0.9):
        for n in (10, 30, 100):
            covered = 0
            for _ in range(2000):
                k = sum(rng.random() < p for _ in range(n))
                lo, hi = wilson(k, n)
                covered += lo <= p <= hi
            shares.append(covered / 2000)
            assert covered / 2000 >= 0.90, (p, n, covered)
    assert sum(shares) / len(shares) >= 0.94, shares


def _row(variant: str, failures: int, runs: int) -> RunRow:
    counts = {Kind.HANG: failures, Kind.PASS: runs - failures}
    counts = {k: c for k, c in counts.items() if c}
    kind = Kind.HANG if failures else Kind.PASS
    return RunRow({"variant": variant}, variant, kind, runs=runs, counts=counts)


def _auto_compare(rng: random.Random, p_base: float, p_fix: float, cap: int) -> Decision:
    """`compare --repeat auto` over simulated runs: a first round of 4, then next_round."""
    fails = [0, 0]
    have = 0
    want: int | None = 4
    while want is not None:
        for i, p in enumerate((p_base, p_fix)):
            fails[i] += sum(rng.random() < p for _ in range(want - have))
        have = want
        judged = judge_compare([_row("stock", fails[0], have), _row("fix", fails[1], have)])
        want = next_round(judged, have, cap)
    return judged.decision


def test_a_fix_no_better_than_the_baseline_is_almost_never_confirmed() -> None:
    rng = random.Random(7)
    for p in (0.25, 0.5, 1.0):
        confirmed = sum(_auto_compare(rng, p, p, 40) is Decision.CONFIRMED for _ in range(500))
        assert confirmed / 500 <= 0.03, (p, confirmed)


def test_a_better_fix_is_not_refuted_on_an_unlucky_first_round() -> None:
    """A fix that cuts a 30% hang to 10% can fail 1 of 4 runs as often as the baseline does:
    that is no refutation (more runs are made); a "fix" that hangs as often as an always
    hanging baseline is refuted at the first round."""
    rng = random.Random(5)
    refuted = [_auto_compare(rng, 0.3, 0.1, 40) for _ in range(300)]
    assert refuted.count(Decision.REFUTED) / 300 <= 0.03, refuted.count(Decision.REFUTED)
    judged = judge_compare([_row("stock", 4, 4), _row("fixed", 4, 4)])
    assert judged.decision is Decision.REFUTED and "at least half as often" in judged.why
    early = judge_compare([_row("stock", 1, 4), _row("fixed", 1, 4)])
    assert early.decision is Decision.UNSETTLED and next_round(early, 4, 20) == 8


def test_a_real_fix_is_confirmed_once_enough_runs_are_in() -> None:
    rng = random.Random(11)
    # a hang in every run: four runs each settle it
    assert all(_auto_compare(rng, 1.0, 0.0, 20) is Decision.CONFIRMED for _ in range(50))
    # a hang in a quarter of the runs: seldom settled within 20 runs each (then unsettled,
    # or "not reproduced" when the baseline happened not to fail), mostly within 60
    capped = [_auto_compare(rng, 0.25, 0.0, 20) for _ in range(300)]
    settled = [_auto_compare(rng, 0.25, 0.0, 60) for _ in range(300)]
    assert capped.count(Decision.CONFIRMED) / 300 <= 0.5
    assert settled.count(Decision.CONFIRMED) / 300 >= 0.6
    assert Decision.REFUTED not in capped + settled  # a real fix is never called no fix


def test_one_run_each_is_unsettled_and_says_how_many_would_settle_it() -> None:
    judged = judge_compare([_row("stock", 1, 1), _row("fixed", 0, 1)])
    assert judged.decision is Decision.UNSETTLED and judged.runs_needed == 4
    assert "about 4 runs per variant would settle it" in judged.why
    refuted = judge_compare([_row("stock", 8, 8), _row("fixed", 8, 8)])
    assert refuted.decision is Decision.REFUTED and refuted.why.startswith("not confirmed")
    none = judge_compare([_row("stock", 0, 6), _row("fixed", 0, 6)])
    assert none.decision is Decision.NOT_REPRODUCED and "passes all 6 runs" in none.why


def test_a_step_called_clean_under_the_rule_is_rarely_bad() -> None:
    """Clean after `clean_runs_needed(p)` runs: a commit failing at rate p passes them all
    less than 5% of the time, for every rate."""
    for p in (0.1, 0.25, 0.5, 0.9, 1.0):
        n = clean_runs_needed(p)
        assert n is not None and miss_chance(n, p) < 0.05, (p, n)
