"""The default search of `harness bisect` (docs/bisect.md, "The posterior search"): one run at
a time, wherever the posterior over the first bad commit (bisect/posterior.py) expects to
learn the most per second, until one hypothesis holds --confidence or a budget (--max-runs,
--budget) is spent. Every run of every commit, the ends included, is evidence, and none is
final: a commit is run again whenever the posterior asks for it.

A run's outcome is the failure sought, another failure, or a pass. The failure sought is a
signature: its kind (--expect) at its location (--location; else the location of the first
failure of that kind at the bad end, which the search runs first). A run that could not be
built or prepared (build-failed, error) tells nothing about the failure: its commit is
untestable and not chosen again, and a first bad commit hidden behind untestable ones is a
range, as with git bisect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.bisect import posterior as post
from harness.bisect.model import (
    UNREPEATABLE,
    BisectOptions,
    BisectResult,
    PosteriorSummary,
    SideRate,
    StepRecord,
    save,
)
from harness.bisect.steps import classify_run, combine, run_once
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.report.runs import RunRow
from harness.source.gitrepo import CommitInfo, diffstat
from harness.stats import Rate
from harness.vocab import BisectClass, BisectRole, BisectStatus

# the most runs of one bisect when neither --max-runs nor --budget bounds it: far past what
# a 10% failure over 128 commits needs (about 600), short of running for ever
RUNS_CAP = 2000
_OUTCOME = {BisectClass.BAD: post.SOUGHT, BisectClass.GOOD: post.PASS}
# the expectations whose failures have a location to learn (any-failure takes any; a
# hazard's location is part of --expect hazard:KIND:LOCATION)
LEARNS = ("hang", "crash", "check-failed")


@dataclass
class Sought:
    """What counts as the failure sought, in this search and in bisect-step's (gitstep): its
    kind (--expect) at its location: --location, else the location of the bad end's first
    failure of that kind, learned once (the hang's signature)."""

    expect: str
    location: str | None = None
    known: bool = False

    @classmethod
    def of(cls, opts: BisectOptions, learned: str | None = None) -> Sought:
        known = opts.location is not None or opts.expect not in LEARNS or learned is not None
        return cls(opts.expect, opts.location or learned, known)

    def judge(self, row: RunRow, bad_end: bool) -> BisectClass:
        """The run's class; a bad end's first failure of the kind sought names the
        signature first."""
        shows = classify_run(row.kind, row.location, self.expect, None, row.hazard)
        if bad_end and not self.known and shows is BisectClass.BAD:
            self.location, self.known = row.location, True
        return classify_run(row.kind, row.location, self.expect, self.location, row.hazard)


def outcome_of(row: RunRow, cls: BisectClass) -> int | None:
    """The model's outcome of a judged run; None for a run that could not be built or
    prepared (build-failed, error): it says nothing about the failure."""
    if row.kind in UNREPEATABLE:
        return None
    return _OUTCOME.get(cls, post.OTHER)


class AdaptiveSearch:
    """The posterior search over `result.candidates` (positions: 0 the good end, i + 1 the
    candidate i). `clock`: seconds, for --budget."""

    def __init__(self, result: BisectResult, clock: Callable[[], float] = time.monotonic) -> None:
        self.result = result
        self.setup = result.setup
        self.opts = result.setup.opts
        self.n = len(result.candidates)
        self.model = post.Model(self.n + 1)
        self.costs = post.Costs()
        self.untestable: set[int] = set()
        self.built: set[int] = set()
        self.sought = Sought.of(self.opts)
        self.clock = clock
        self.started = clock()

    # ------------------------------------------------------------ positions

    def commit_at(self, position: int) -> CommitInfo:
        return self.result.good if position == 0 else self.result.candidates[position - 1]

    def role_at(self, position: int) -> BisectRole:
        if position == 0:
            return BisectRole.GOOD_END
        return BisectRole.BAD_END if position == self.n else BisectRole.SEARCH

    # ------------------------------------------------------------ one run

    def run(self, position: int) -> StepRecord:
        res, opts = self.result, self.opts
        commit = self.commit_at(position)
        number = len(res.search_steps) + 1
        self.opts.run.progress.label = (
            f"harness bisect {opts.run.env} [run {number}: {self.role_at(position)} "
            f"{commit.short} {commit.subject[:40]}]"
        )
        row = run_once(self.setup, commit, opts.run.variant, res.directory / "steps")
        cls = self.sought.judge(row, bad_end=position == self.n)
        step = StepRecord(
            self.role_at(position), position - 1, commit, opts.run.variant, cls, [row], [cls]
        )
        res.steps.append(step)
        outcome = outcome_of(row, cls)
        if outcome is None:
            self.untestable.add(position)
        else:
            self.model.add(position, outcome)
            self.costs.add(
                outcome, row.run_s or row.wall_s or 1.0, None if row.cache_hit else row.build_s
            )
            self.built.add(position)
        return step

    # ------------------------------------------------------------ the search

    def search(self) -> None:
        """The bad end first (the failure must show there before anything else matters,
        and its first failure is the signature sought), then the posterior's choices."""
        first = self.run(self.n)
        save(self.result)
        if self.n in self.untestable:
            raise HarnessError(
                f"the bad end {self.result.bad.short} cannot be tested: {first.decisive.summary}",
                USAGE,
            )
        stopped = ""
        while True:
            p = self.model.posterior()
            stopped = self._stop(p)
            if stopped:
                break
            position = post.choose(self.model, p, self.costs, self.built, self.untestable)
            if not self.sought.known:
                # the bad end again until its first failure names the signature sought: a
                # run elsewhere before that would be judged by another definition
                position = self.n
            if position is None:
                stopped = "nothing left to learn (the rest is untestable)"
                break
            self.run(position)
            save(self.result)
        self.conclude(self.model.posterior(), stopped)

    def _stop(self, p: list[float]) -> str:
        """Why the search stops now ("" to go on)."""
        _, top = post.best(p)
        if top >= self.opts.confidence:
            return "confidence"
        if post.not_reproduced(self.model):
            return "not reproduced"
        if post.no_change(self.model, self.opts.confidence):
            return "no change"  # the good end fails as surely as the bad end
        if self.model.runs + len(self._untestable_runs()) >= (self.opts.max_runs or RUNS_CAP):
            return f"budget: {self.opts.max_runs or RUNS_CAP} runs"
        if self.opts.budget_s is not None and self.clock() - self.started >= self.opts.budget_s:
            return f"budget: {self.opts.budget_s:g} s"
        a, b = post.shortest_range(p, self.opts.confidence)
        if b > a and all(j in self.untestable for j in range(a, b)):
            return "untestable commits hide the change"  # no run can split [a, b]
        return ""

    def _untestable_runs(self) -> list[StepRecord]:
        return [
            s
            for s in self.result.search_steps
            if s.classification == BisectClass.SKIP and s.decisive.kind in UNREPEATABLE
        ]

    # ------------------------------------------------------------ the answer

    def aggregate(self, position: int) -> StepRecord | None:
        """Every run of one position as one tested commit (None: never run)."""
        runs = [s for s in self.result.search_steps if s.index == position - 1]
        if not runs:
            return None
        rows = [s.runs[0] for s in runs]
        classes = [s.classes[0] for s in runs]
        role = self.role_at(position)
        return StepRecord(
            role,
            position - 1,
            self.commit_at(position),
            self.opts.run.variant,
            combine(classes),
            rows,
            classes,
        )

    def conclude(self, p: list[float], stopped: str) -> None:
        res, conf = self.result, self.opts.confidence
        k, top = post.best(p)
        a, b = post.shortest_range(p, conf)
        res.posterior = self.summary(p, k, top, (a, b), stopped)
        if stopped == "confidence" and 1 <= k <= self.n:
            first = self.aggregate(k)
            if first is not None and first.classification == BisectClass.BAD:
                res.status = BisectStatus.FOUND
                res.first_bad, res.parent = first, self.aggregate(k - 1)
                res.diffstat = diffstat(self.setup.root, first.commit.sha)
                return
            # the likeliest commit never failed itself (untestable, or only passed): no
            # commit is named on inference alone
            res.posterior.stopped = stopped = (
                f"confidence, but {self.commit_at(k).short} never showed the failure itself"
            )
        if stopped == "no change":
            raise HarnessError(
                f"the failure sought shows as often at the good end {res.good.short} as at the "
                f"bad end {res.bad.short}: nothing changed between them (good end "
                f"{_rate(self.model.counts[0])}, bad end {_rate(self.model.counts[-1])}): "
                "pick an older --good",
                USAGE,
            )
        if stopped == "confidence" and k == 0:
            raise HarnessError(
                f"the good end {res.good.short} shows the failure too "
                f"({res.posterior.probability:.1%} that the change is at or before it): "
                "pick an older --good",
                USAGE,
            )
        if stopped == "not reproduced" or (stopped == "confidence" and k == self.n + 1):
            res.status = BisectStatus.NOT_REPRODUCED
            return
        res.status = (
            BisectStatus.RANGE if stopped.startswith("untestable") else BisectStatus.UNCERTAIN
        )
        res.possible = [self.commit_at(j) for j in range(max(a, 1), min(b, self.n) + 1)]

    def summary(
        self, p: list[float], k: int, top: float, span: tuple[int, int], stopped: str
    ) -> PosteriorSummary:
        before, after = post.side_counts(self.model, k)
        labels = ["before"] + [c.short for c in self.result.candidates] + ["none"]
        return PosteriorSummary(
            confidence=self.opts.confidence,
            likeliest=labels[k],
            probability=top,
            range=[labels[j] for j in range(span[0], span[1] + 1)],
            per_commit=[(labels[j], p[j]) for j in range(len(p))],
            before=SideRate(*before),
            after=SideRate(*after),
            signature=self._signature(),
            stopped=stopped,
            untestable=[self.commit_at(j).short for j in sorted(self.untestable)],
        )

    def _signature(self) -> str:
        from harness.bisect.steps import expected

        if self.opts.location is None and self.sought.location is not None:
            return f"{expected(self.opts)} in {self.sought.location} (the bad end's first failure)"
        return expected(self.opts)


def _rate(counts: Sequence[int]) -> str:
    """One position's runs as "2/9 failed (22%, 95% CI …)": the failure sought of its runs."""
    return Rate(counts[post.SOUGHT], sum(counts)).text() + " failed"
