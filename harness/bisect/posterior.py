"""Where a failure came in, as a posterior over the first bad commit (docs/bisect.md, "The
model"): one change point on the first-parent line, the runs on either side of it following
rates of their own that nobody knows, every run of every commit (the ends included)
evidence. Pure arithmetic over counts: nothing here runs anything.

Positions: 0 is the good end, 1..N the candidates oldest first (N is the bad end). The
hypothesis k (0..N+1) says position k is the first bad one: positions >= k follow the
"after" rates, the others the "before" rates; k = 0 puts the change at or before the good
end (the good end is bad too), k = N+1 says nothing changed in the range (the bad end is
not bad).

A run ends one of three ways: the failure sought (its signature: kind and location),
another failure, or a pass. Each side draws its runs from a distribution over the three
under a Dirichlet prior, both unknown and integrated out in closed form (lgamma); the
before side's prior is a mixture with "the failure sought never shows here" (`clean`): the
old "a failure is proof", made soft and stated. A hypothesis's likelihood is the product of
its two sides' marginal likelihoods, computed for every k at once from prefix sums.

The next run goes where it is expected to tell the most about k, per second it costs: the
expected drop of the posterior's entropy over the run's three outcomes as the model
predicts them (exact predictives, O(N) for all positions through prefix sums), divided by
the run's expected cost (each outcome's mean duration so far, plus a build where the commit
is not built yet).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from harness.stats import Rate, separated

SOUGHT, OTHER, PASS = 0, 1, 2
ML_CACHE = 200_000  # marginal likelihoods kept (about 8 new ones a hypothesis a run)
OUTCOMES = (SOUGHT, OTHER, PASS)
Counts = tuple[int, int, int]


@dataclass(frozen=True)
class Priors:
    """The model's priors (docs/bisect.md, "The priors"): Dirichlet weights over (sought,
    other, pass) on each side, the weight of the before side's "clean" component, and the
    prior mass of each end hypothesis (k = 0, k = N+1)."""

    # before the change: most runs pass (a weight of 2 on pass); "clean", the failure
    # sought never shows there, has 30% of the prior (the old "a failure is proof", soft)
    before: tuple[float, float, float] = (0.5, 0.5, 2.0)
    clean: float = 0.3
    # after it: Jeffreys' prior, no outcome favoured (any failure rate is as plausible)
    after: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # the good end bad too, or the bad end not bad: each this much of the prior
    ends: float = 0.005


def _log_beta(alphas: Sequence[float]) -> float:
    return sum(math.lgamma(a) for a in alphas) - math.lgamma(sum(alphas))


def _log_ml(n: Sequence[int], alpha: Sequence[float]) -> float:
    """log P(one given sequence of runs with these counts) under Dirichlet(alpha)."""
    return _log_beta([a + k for a, k in zip(alpha, n, strict=True)]) - _log_beta(alpha)


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _plus(n: Counts, o: int) -> Counts:
    return (n[0] + (o == SOUGHT), n[1] + (o == OTHER), n[2] + (o == PASS))


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


@dataclass
class Model:
    """The runs' counts per position, and the posterior they give."""

    positions: int  # N + 1: the good end and the N candidates
    priors: Priors = field(default_factory=Priors)
    counts: list[list[int]] = field(default_factory=list)
    _ml: dict[tuple[bool, Counts], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.positions < 2:
            raise ValueError("a model needs the good end and at least one candidate")
        if not self.counts:
            self.counts = [[0, 0, 0] for _ in range(self.positions)]

    def add(self, position: int, outcome: int) -> None:
        self.counts[position][outcome] += 1
        if len(self._ml) > ML_CACHE:  # most keys are of counts no split has any more
            self._ml.clear()

    @property
    def runs(self) -> int:
        return sum(map(sum, self.counts))

    # ------------------------------------------------------------ one side

    def _side(self, after: bool, n: Counts) -> float:
        """log marginal likelihood of one side's runs."""
        key = (after, n)
        found = self._ml.get(key)
        if found is None:
            p = self.priors
            if after:
                found = _log_ml(n, p.after)
            else:
                clean = _log(p.clean) + _log_ml(n[1:], p.before[1:]) if n[SOUGHT] == 0 else -1e308
                found = _logsumexp([clean, _log(1 - p.clean) + _log_ml(n, p.before)])
            self._ml[key] = found
        return found

    def splits(self) -> list[tuple[Counts, Counts]]:
        """For each k in 0..N+1: (the counts before k, the counts from k on)."""
        total = [sum(c[o] for c in self.counts) for o in OUTCOMES]
        out, run = [], [0, 0, 0]
        for k in range(self.positions + 1):
            out.append(
                (
                    (run[0], run[1], run[2]),
                    (total[0] - run[0], total[1] - run[1], total[2] - run[2]),
                )
            )
            if k < self.positions:
                for o in OUTCOMES:
                    run[o] += self.counts[k][o]
        return out

    def _log_prior(self, k: int) -> float:
        ends = self.priors.ends
        if k in (0, self.positions):
            return _log(ends)
        return _log((1 - 2 * ends) / (self.positions - 1))

    # ------------------------------------------------------------ the posterior

    def posterior(self) -> list[float]:
        """P(k) for k in 0..N+1."""
        logs = [
            self._log_prior(k) + self._side(False, b) + self._side(True, a)
            for k, (b, a) in enumerate(self.splits())
        ]
        z = _logsumexp(logs)
        return [math.exp(v - z) for v in logs]

    def _predictives(self) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
        """For each k: the chance of each outcome of one more run before k and from k on."""
        out = []
        for b, a in self.splits():
            mb, ma = self._side(False, b), self._side(True, a)
            out.append(
                (
                    tuple(math.exp(self._side(False, _plus(b, o)) - mb) for o in OUTCOMES),
                    tuple(math.exp(self._side(True, _plus(a, o)) - ma) for o in OUTCOMES),
                )
            )
        return out

    def predict(self, position: int, post: Sequence[float]) -> tuple[float, float, float]:
        """The chance of each outcome of one more run at `position`."""
        preds = self._predictives()
        p = [sum(q * preds[k][position >= k][o] for k, q in enumerate(post)) for o in OUTCOMES]
        return p[0], p[1], p[2]

    def gains(self, post: Sequence[float]) -> tuple[list[float], list[tuple[float, ...]]]:
        """For each position: the expected drop of the posterior's entropy (nats) from one
        more run there, and that run's outcome chances. O(N) for all positions: over k,
        prefix sums of x = P(k)·pred and of x·log x, where pred is the after side's for
        k <= j and the before side's for k > j."""
        preds = self._predictives()
        kk = len(post)
        h0 = -sum(_xlogx(p) for p in post)
        # per outcome: prefix sums over k of the after-side terms and the before-side terms
        acc = []
        for o in OUTCOMES:
            a, al, b, bl = [0.0], [0.0], [0.0], [0.0]
            for k in range(kk):
                xa, xb = post[k] * preds[k][1][o], post[k] * preds[k][0][o]
                a.append(a[-1] + xa)
                al.append(al[-1] + _xlogx(xa))
                b.append(b[-1] + xb)
                bl.append(bl[-1] + _xlogx(xb))
            acc.append((a, al, b, bl))
        gains, chances = [], []
        for j in range(self.positions):
            expected, chance = 0.0, []
            for o in OUTCOMES:
                a, al, b, bl = acc[o]
                z = a[j + 1] + b[kk] - b[j + 1]  # P(o) at j
                s = al[j + 1] + bl[kk] - bl[j + 1]
                if z > 0:
                    expected += z * math.log(z) - s  # P(o)·H(K | o)
                chance.append(z)
            gains.append(max(0.0, h0 - expected))
            chances.append(tuple(chance))
        return gains, chances


@dataclass
class Costs:
    """What a run costs, learned as the search goes: each outcome's mean seconds, and a
    build's (a commit not built yet pays it once)."""

    seconds: dict[int, list[float]] = field(default_factory=dict)
    builds: list[float] = field(default_factory=list)

    def add(self, outcome: int, run_s: float, build_s: float | None) -> None:
        self.seconds.setdefault(outcome, []).append(max(0.0, run_s))
        if build_s is not None and build_s > 0:
            self.builds.append(build_s)

    def mean(self, outcome: int) -> float:
        seen = self.seconds.get(outcome)
        if seen:
            return sum(seen) / len(seen)
        every = [s for v in self.seconds.values() for s in v]
        return sum(every) / len(every) if every else 1.0

    def of(self, chances: Sequence[float], built: bool) -> float:
        """The expected seconds of one more run with these outcome chances."""
        run = sum(c * self.mean(o) for o, c in zip(OUTCOMES, chances, strict=True))
        build = 0.0 if built or not self.builds else sum(self.builds) / len(self.builds)
        return max(1e-3, run + build)


def choose(
    model: Model,
    post: Sequence[float],
    costs: Costs,
    built: Collection[int] = (),
    untestable: Collection[int] = (),
) -> int | None:
    """The position whose next run tells the most about k per second; None when no run
    anywhere can tell anything (every position untestable, or nothing left to learn)."""
    gains, chances = model.gains(post)
    best_j, best_rate = None, 0.0
    middle = (model.positions - 1) / 2
    for j, g in enumerate(gains):
        if j in untestable or g <= 1e-12:
            continue
        rate = g / costs.of(chances[j], j in built)
        # ties (a flat posterior) go to the middle, as a binary search would
        if (
            best_j is None
            or rate > best_rate * (1 + 1e-9)
            or (rate >= best_rate * (1 - 1e-9) and abs(j - middle) < abs(best_j - middle))
        ):
            best_j, best_rate = j, rate
    return best_j


def best(post: Sequence[float]) -> tuple[int, float]:
    """The likeliest hypothesis and its probability."""
    k = max(range(len(post)), key=lambda i: post[i])
    return k, post[k]


def shortest_range(post: Sequence[float], mass: float = 0.95) -> tuple[int, int]:
    """The shortest [a, b] of consecutive hypotheses holding at least `mass`."""
    n = len(post)
    found, j, total = (0, n - 1), 0, 0.0
    for i in range(n):
        while j < n and total < mass - 1e-12:
            total += post[j]
            j += 1
        if total >= mass - 1e-12 and j - 1 - i < found[1] - found[0]:
            found = (i, j - 1)
        total -= post[i]
    return found


# the bad end's runs with no failure sought anywhere after which the failure counts as not
# reproduced: a rate of 0 in 10 runs is under 31% at 95% (Wilson), reported as such
NOT_REPRODUCED_RUNS = 10


def not_reproduced(model: Model, runs: int = NOT_REPRODUCED_RUNS) -> bool:
    """The bad end ran `runs` times and no run anywhere showed the failure sought. The
    posterior alone never says so: a change to a failure rate near 0 explains such runs as
    well as no change at all."""
    bad_end = model.counts[-1]
    return sum(bad_end) >= runs and not any(c[SOUGHT] for c in model.counts)


# "no change between the ends": a failure that shows at the good end no less surely than at
# the bad end. The posterior says so only slowly (a change between two equal rates is a
# hypothesis for every k), so the rule reads the ends once each has this many runs
NO_CHANGE_RUNS = 8


def no_change(model: Model, confidence: float) -> bool:
    """The good end showed the failure sought, both ends ran NO_CHANGE_RUNS times, and
    their rates are not apart at 95% (the good end's interval reaches the bad end's); or the
    posterior itself puts `confidence` on "before the range" and "no change" together."""
    p = model.posterior()
    if p[0] + p[-1] >= confidence:
        return True
    good, bad = model.counts[0], model.counts[-1]
    if sum(good) < NO_CHANGE_RUNS or sum(bad) < NO_CHANGE_RUNS or not good[SOUGHT]:
        return False
    return not separated(Rate(good[SOUGHT], sum(good)), Rate(bad[SOUGHT], sum(bad)))


def side_counts(model: Model, k: int) -> tuple[Counts, Counts]:
    """The runs' counts before k and from k on."""
    return model.splits()[k]
