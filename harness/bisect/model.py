"""What a bisect is made of: its options (a RunOptions plus the search's own), one run of one
commit, one tested commit, and the result with its report.json form (docs/bisect.md); with
repeated runs, the bad end's failure rate and the confidence of the answer."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness import __version__, outcome
from harness.config.pin import Pin
from harness.filenames import REPORT_JSON
from harness.files import atomic_write
from harness.outcome import BisectExit, Kind
from harness.pipeline.options import RunOptions
from harness.report.runs import RunRow
from harness.source.gitrepo import CommitInfo
from harness.stats import Rate
from harness.vocab import AUTO, BisectClass, BisectRole, BisectStatus

SCHEMA_VERSION = 1
# the failures a bisect looks for: the kinds the outcome registry says reproduce a failure
FAILURES = outcome.REPRODUCED
EXPECTS: dict[str, frozenset[Kind]] = {
    "hang": frozenset({Kind.HANG}),
    "crash": frozenset({Kind.CRASH, Kind.ERROR_EXIT}),  # both are exit code 3
    "check-failed": frozenset({Kind.CHECK_FAILED}),
    "any-failure": FAILURES,
    # --expect hazard:KIND[:LOCATION]: the run's own --expect makes a passing run that shows
    # that hazard a `hazard` verdict (pipeline/hazards.py); the hazard is in RunOptions
    "hazard": frozenset({Kind.HAZARD}),
}
HAZARD = "hazard"
# the same tree fails to build (or to prepare) the same way every time: repeating is useless
UNREPEATABLE = frozenset({Kind.BUILD_FAILED, Kind.ERROR})
Repeat = int | Literal["auto"]
DEFAULT_REPEAT_CAP = 20


GRID = 2000  # points of the numeric integral over the bad end's rate


def posterior_miss(clean: int, rate: Rate) -> float:
    """The chance that a commit failing like the bad end passes `clean` runs in a row, over
    what the bad end's runs say its rate may be (a uniform prior updated by its failures and
    passes: Beta(f+1, s+1)); E[(1-p)^n] = prod over i < n of (s+1+i)/(f+s+2+i). Unlike
    (1-p̂)^n at the observed rate p̂, it does not trust 3 failures in 5 runs to mean 60%."""
    f, s = rate.failures, rate.runs - rate.failures
    m = 1.0
    for i in range(clean):
        m *= (s + 1 + i) / (f + s + 2 + i)
    return m


def joint_confidence(rate: Rate, cleans: list[int]) -> float:
    """The chance that none of the good steps (with these clean runs) was a commit failing
    like the bad end, over the same Beta(f+1, s+1) for the rate: one rate shared by every
    step, so the steps' misses go together (a midpoint integral over GRID points)."""
    f, s = rate.failures, rate.runs - rate.failures
    log_norm = math.lgamma(f + 1) + math.lgamma(s + 1) - math.lgamma(f + s + 2)
    total = 0.0
    for k in range(GRID):
        p = (k + 0.5) / GRID
        held = 1.0
        for n in cleans:
            held *= 1.0 - (1.0 - p) ** n
        density = math.exp(f * math.log(p) + s * math.log1p(-p) - log_norm)
        total += held * density / GRID
    return min(1.0, total)


@dataclass(frozen=True)
class BisectOptions:
    """A run's options (env, pin, checkout, variant built at every step, limits, sampling,
    report folder …) plus what the search needs."""

    run: RunOptions
    good: str = ""
    bad: str = ""
    expect: str = "hang"  # hang | crash | check-failed | any-failure | hazard (run.expect_hazard)
    location: str | None = None  # a bad step's verdict must be located here
    # None (the default): the posterior search (bisect/adaptive.py); N: the classic binary
    # search, N runs per commit at most; "auto": the classic search with the bad end's
    # rate deciding each commit's clean runs (steps.py)
    repeat: Repeat | None = None
    repeat_cap: int = DEFAULT_REPEAT_CAP  # auto: the most runs of one commit
    confirm_fix: str | None = None  # variant to run on the first bad commit
    confidence: float = 0.95  # the posterior search stops when one hypothesis holds this
    max_runs: int | None = None  # the posterior search's budget of runs
    budget_s: float | None = None  # and of seconds

    @property
    def auto(self) -> bool:
        return self.repeat == AUTO

    @property
    def adaptive(self) -> bool:
        """The posterior search (the default), not the classic binary search."""
        return self.repeat is None


@dataclass
class StepRecord:
    """One tested commit: up to --repeat runs (each a RunRow, the row every multi-run
    command shares) and how each was classified for the failure sought."""

    role: BisectRole
    index: int  # position among the candidates, oldest 0; the good end is -1
    commit: CommitInfo
    variant: str
    classification: BisectClass  # of the runs together
    runs: list[RunRow]
    classes: list[BisectClass]  # each run's, in the order of `runs`
    # a good step under repetition: the clean runs the rule asked for (None: no rate known)
    target: int | None = None
    # the chance that a commit failing like the bad end passes this step's clean runs
    # (`posterior_miss`)
    miss: float | None = None

    @property
    def settled(self) -> bool | None:
        """A good step that ran its target of clean runs (False: stopped at the cap)."""
        if self.classification != BisectClass.GOOD or self.target is None:
            return None
        return self.counts()[BisectClass.GOOD] >= self.target

    @property
    def decisive_at(self) -> int:
        """The run that decided the classification: the first bad one, else the last."""
        return next(
            (i for i, c in enumerate(self.classes) if c == BisectClass.BAD),
            len(self.runs) - 1,
        )

    @property
    def decisive(self) -> RunRow:
        return self.runs[self.decisive_at]

    def counts(self) -> dict[str, int]:
        tally = {str(c): sum(k == c for k in self.classes) for c in BisectClass}
        return {"runs": len(self.runs), **tally}

    def run_json(self, at: int) -> dict[str, Any]:
        """One run as report.json writes it: its row and its classification."""
        return {**self.runs[at].to_json(), "classification": self.classes[at]}

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "index": self.index,
            "commit": asdict(self.commit),
            "variant": self.variant,
            "classification": self.classification,
            "counts": self.counts(),
            "target": self.target,
            "miss_chance": self.miss,
            "settled": self.settled,
            "verdict": self.run_json(self.decisive_at),
            "runs": [self.run_json(i) for i in range(len(self.runs))],
        }


@dataclass(frozen=True)
class SideRate:
    """The runs on one side of the likeliest change: the failure sought, other failures,
    passes."""

    sought: int
    other: int
    passed: int

    @property
    def rate(self) -> Rate:
        return Rate(self.sought, self.sought + self.other + self.passed)

    def to_json(self) -> dict[str, Any]:
        r = self.rate
        return {
            "sought": self.sought,
            "other": self.other,
            "passed": self.passed,
            "rate": round(r.value, 4),
            "ci95": [round(b, 4) for b in r.ci95],
        }


@dataclass
class PosteriorSummary:
    """The posterior search's answer (bisect/adaptive.py, docs/bisect.md): the likeliest
    hypothesis and its probability, the shortest run of hypotheses holding `confidence`,
    every hypothesis's probability (labels: "before", each candidate's short sha, "none"),
    the failure rates on either side of the likeliest change, what counted as the failure
    sought, and why the search stopped."""

    confidence: float
    likeliest: str
    probability: float
    range: list[str]
    per_commit: list[tuple[str, float]]
    before: SideRate
    after: SideRate
    signature: str
    stopped: str
    untestable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "confidence": self.confidence,
            "likeliest": self.likeliest,
            "probability": round(self.probability, 6),
            "range": self.range,
            "hypotheses": [{"commit": c, "p": round(p, 6)} for c, p in self.per_commit],
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "signature": self.signature,
            "stopped": self.stopped,
            "untestable": self.untestable,
        }


@dataclass
class Setup:
    """What every step shares, validated once before anything is built."""

    opts: BisectOptions
    pin: Pin
    root: Path


@dataclass
class BisectResult:
    run_id: str
    directory: Path
    setup: Setup
    good: CommitInfo
    bad: CommitInfo
    candidates: list[CommitInfo]  # good..bad on the first-parent line, oldest first
    steps: list[StepRecord] = field(default_factory=list)
    status: BisectStatus = BisectStatus.RUNNING
    first_bad: StepRecord | None = None
    parent: StepRecord | None = None  # the last good step before the first bad commit
    possible: list[CommitInfo] = field(default_factory=list)  # status "range"
    diffstat: str = ""
    confirm: StepRecord | None = None
    posterior: PosteriorSummary | None = None  # the posterior search's answer
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def search_steps(self) -> list[StepRecord]:
        return [s for s in self.steps if s.role is not BisectRole.CONFIRM_FIX]

    @property
    def runs(self) -> list[RunRow]:
        return [r for s in self.steps for r in s.runs]

    @property
    def step_bound(self) -> int:
        """⌈log2 N⌉ + skips + 2 (the ends): the most steps the search may take."""
        skips = sum(s.classification == BisectClass.SKIP for s in self.search_steps)
        return (len(self.candidates) - 1).bit_length() + skips + 2

    @property
    def bad_end(self) -> StepRecord | None:
        return next((s for s in self.steps if s.role is BisectRole.BAD_END), None)

    @property
    def bad_rate(self) -> Rate | None:
        """The bad end's failure rate: its runs that showed the failure sought, of those that
        passed or showed it (a skipped run tested nothing)."""
        end = self.bad_end
        if end is None:
            return None
        c = end.counts()
        return Rate(c[BisectClass.BAD], c[BisectClass.BAD] + c[BisectClass.GOOD])

    @property
    def good_steps(self) -> list[StepRecord]:
        return [s for s in self.search_steps if s.classification == BisectClass.GOOD]

    @property
    def confidence(self) -> float | None:
        """The chance that no step called good was bad after all, were each a commit failing
        like the bad end (`joint_confidence`, docs/bisect.md). None until the bad end's rate
        is known."""
        if self.setup.opts.adaptive:
            return None if self.posterior is None else self.posterior.probability
        rate = self.bad_rate
        if rate is None or not rate.runs:
            return None
        return joint_confidence(rate, [s.counts()[BisectClass.GOOD] for s in self.good_steps])

    @property
    def location_matched(self) -> bool | None:
        want = self.setup.opts.location
        if self.first_bad is None or want is None:
            return None
        return self.first_bad.decisive.location == want

    @property
    def fix_confirmed(self) -> bool | None:
        return None if self.confirm is None else self.confirm.classification == BisectClass.GOOD

    @property
    def exit_code(self) -> int:
        """0: a first bad commit was named (and the fix, if asked, passes on it); 1: not."""
        found = self.status is BisectStatus.FOUND
        named = found and self.fix_confirmed is not False
        return BisectExit.FOUND if named else BisectExit.NOT_FOUND

    def totals(self) -> dict[str, int]:
        runs = self.runs
        built = [r for r in runs if r.build_key and not r.cache_hit]
        return {
            "steps": len(self.search_steps),
            "skips": sum(s.classification == BisectClass.SKIP for s in self.search_steps),
            "step_bound": self.step_bound,
            "runs": len(runs),
            "builds": len(built),
            "distinct_builds": len({r.build_key for r in runs if r.build_key}),
            "cache_hits": sum(bool(r.cache_hit) for r in runs),
            "build_failures": sum(r.kind is Kind.BUILD_FAILED for r in runs),
        }

    def message(self) -> str:
        if self.error:
            return self.error
        if self.status is BisectStatus.FOUND and self.first_bad is not None:
            c = self.first_bad.commit
            return f"{c.sha} is the first bad commit: {c.subject}"
        if self.status is BisectStatus.RANGE:
            listed = ", ".join(f"{c.short} {c.subject}" for c in self.possible)
            return f"the first bad commit could be any of: {listed}"
        post = self.posterior
        if self.status is BisectStatus.NOT_REPRODUCED and post is not None:
            end = [s for s in self.search_steps if s.role is BisectRole.BAD_END]
            rate = Rate(sum(s.classification == BisectClass.BAD for s in end), len(end))
            return (
                f"the failure sought does not reproduce at the bad end {self.bad.short}: "
                f"{rate.text()} of its runs showed it, nothing to bisect"
            )
        if self.status is BisectStatus.UNCERTAIN and post is not None:
            return (
                f"no commit holds {post.confidence:.0%} ({post.stopped}): the likeliest is "
                f"{post.likeliest} at {post.probability:.1%}; {post.confidence:.0%} of the "
                f"posterior lies in {', '.join(post.range[:8])}"
                + (f" … ({len(post.range)})" if len(post.range) > 8 else "")
            )
        return self.status

    def to_json(self) -> dict[str, Any]:
        opts = self.setup.opts
        end = self.finished or time.time()
        return {
            "schema_version": SCHEMA_VERSION,
            "harness_version": __version__,
            "mode": "bisect",
            "run_id": self.run_id,
            "status": self.status,
            "started_at": _iso(self.started),
            "finished_at": _iso(self.finished) if self.finished else None,
            "wall_s": round(end - self.started, 3),
            "harness_argv": opts.run.harness_argv,
            "env": opts.run.env,
            "pin": {"name": self.setup.pin.name, "file": str(self.setup.pin.file)},
            "checkout": str(self.setup.root),
            "scenario": opts.run.scenario or opts.run.env,
            "variant": opts.run.variant,
            "expect": opts.run.expect_hazard.spec()
            if opts.expect == HAZARD and opts.run.expect_hazard
            else opts.expect,
            "location": opts.location,
            "repeat": opts.repeat,
            "search": "posterior" if opts.adaptive else "binary",
            "repeat_cap": opts.repeat_cap if opts.auto else None,
            "good": asdict(self.good),
            "bad": asdict(self.bad),
            "candidates": len(self.candidates),
            "steps": [s.to_json() for s in self.steps],
            "totals": self.totals(),
            "result": self._result_json(),
            "confirm_fix": self._confirm_json(),
            "error": self.error,
        }

    def _result_json(self) -> dict[str, Any]:
        return {
            "message": self.message(),
            "first_bad": asdict(self.first_bad.commit) if self.first_bad else None,
            "first_bad_run": _decisive_json(self.first_bad),
            "parent": asdict(self.parent.commit) if self.parent else None,
            "parent_run": _decisive_json(self.parent),
            "possible": [asdict(c) for c in self.possible],
            "location_matched": self.location_matched,
            "diffstat": self.diffstat,
            "confidence": self._confidence_json(),
            "posterior": None if self.posterior is None else self.posterior.to_json(),
        }

    def _confidence_json(self) -> dict[str, Any] | None:
        rate = self.bad_rate
        if self.setup.opts.adaptive or rate is None or not rate.runs:
            return None
        return {
            "bad_rate": {
                "failures": rate.failures,
                "runs": rate.runs,
                "rate": round(rate.value, 4),
                "ci95": [round(b, 4) for b in rate.ci95],
            },
            "value": None if self.confidence is None else round(self.confidence, 6),
            "good_steps": len(self.good_steps),
            "unsettled": [s.commit.short for s in self.good_steps if s.settled is False],
            "runs_per_step": [len(s.runs) for s in self.steps],
        }

    def _confirm_json(self) -> dict[str, Any] | None:
        if self.confirm is None:
            return None
        return {
            "variant": self.confirm.variant,
            "confirmed": self.fix_confirmed,
            "step": self.confirm.to_json(),
        }


def _decisive_json(step: StepRecord | None) -> dict[str, Any] | None:
    return step.run_json(step.decisive_at) if step is not None else None


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


def save(result: BisectResult) -> None:
    """report.json, rewritten (atomically) after every step: a dead bisect leaves its trail."""
    atomic_write(result.directory / REPORT_JSON, json.dumps(result.to_json(), indent=2) + "\n")
