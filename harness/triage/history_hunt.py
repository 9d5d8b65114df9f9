"""The commits History tests, each once per triage, within the budget.

`Hunt` holds what was learned so far (every commit tested, by sha; the rows of the search
back; what one commit's test costs) and refuses a test the budget left does not cover
(`OutOfBudget`); `ReusingBisect` is bisect.search's search told what the search back already
learned, so no commit is run twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.bisect.model import BisectResult, Setup, StepRecord, save
from harness.bisect.search import Search
from harness.bisect.steps import try_commit
from harness.report.live import LiveProgress
from harness.source.gitrepo import CommitInfo
from harness.stats import Rate
from harness.triage.results import SearchedCommit
from harness.vocab import BisectClass, BisectRole


class OutOfBudget(Exception):
    """The budget left does not cover one more commit's test."""


@dataclass
class Hunt:
    """The commits tested so far (by sha), the time left, and what one test costs."""

    setup: Setup
    deadline: float
    estimate_s: float
    progress: LiveProgress
    back: Path  # the search back's run folders
    known: dict[str, StepRecord] = field(default_factory=dict)
    made: list[StepRecord] = field(default_factory=list)  # tested here, in order
    searched: list[SearchedCommit] = field(default_factory=list)  # the result's `searched`
    timed: list[float] = field(default_factory=list)
    bad_rate: Rate | None = None

    def fits(self) -> bool:
        return time.monotonic() + self.estimate_s <= self.deadline

    def label(self, what: str) -> None:
        self.progress.label = f"harness triage {self.setup.opts.run.env} [history: {what}]"

    def test(self, commit: CommitInfo, role: BisectRole) -> StepRecord:
        """A commit tested once per triage: a second ask is answered from what it showed."""
        if commit.sha in self.known:
            return self.known[commit.sha]
        if not self.fits():
            raise OutOfBudget
        started = time.monotonic()
        variant = self.setup.opts.run.variant
        rec = try_commit(self.setup, commit, role, 0, variant, self.back, self.bad_rate)
        self.record(rec, started)
        return rec

    def note(self, rec: StepRecord, how: str, back: int | None = None) -> StepRecord:
        self.searched.append(SearchedCommit(rec.commit.sha, rec.classification, how, back))
        return rec

    def record(self, rec: StepRecord, started: float) -> None:
        self.known[rec.commit.sha] = rec
        self.made.append(rec)
        # the slowest commit seen: a hang costs its startup window and sampling, a pass an
        # epoch; the prior is only a guess until one was timed here
        self.timed.append(time.monotonic() - started)
        self.estimate_s = max(self.timed)


class ReusingBisect(Search):
    """bisect.search's search, told what the search back already learned: a commit tested
    there is answered from its record (relabelled), and the search starts at the nearest
    failing commit found. `lo`/`hi`/`skipped` are kept so a budget that ends the search
    still gives the range left."""

    def __init__(self, result: BisectResult, hunt: Hunt) -> None:
        super().__init__(result)
        self.hunt = hunt
        self.lo, self.hi = -1, len(result.candidates) - 1
        self.skipped: set[int] = set()

    def test(self, index: int, role: BisectRole) -> StepRecord:
        res = self.result
        commit = res.good if index < 0 else res.candidates[index]
        known = self.hunt.known.get(commit.sha)
        if known is None:
            if not self.hunt.fits():
                raise OutOfBudget
            started = time.monotonic()
            step = super().test(index, role)
            self.hunt.record(step, started)
            return step
        step = replace(known, role=role, index=index)
        res.steps.append(step)
        self.tested[index] = step
        save(res)
        return step

    def search(self) -> None:
        cands = self.result.candidates
        bads = [
            i for i, c in enumerate(cands[:-1]) if _is(self.hunt.known.get(c.sha), BisectClass.BAD)
        ]
        if bads:  # the nearest failing commit of the search back: nothing above it matters
            self.hi = min(bads)
            self.test(self.hi, BisectRole.SEARCH)
        while pool := [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]:
            probe = pool[(len(pool) + 1) // 2 - 1]  # as bisect.search: the median
            cls = self.test(probe, BisectRole.SEARCH).classification
            if cls == BisectClass.BAD:
                self.hi = probe
            elif cls == BisectClass.GOOD:
                self.lo = probe
            else:
                self.skipped.add(probe)
        self.conclude(self.lo, self.hi, sorted(i for i in self.skipped if self.lo < i < self.hi))


def _is(rec: StepRecord | None, cls: str) -> bool:
    return rec is not None and rec.classification == cls
