"""Testing one commit: a normal harness run of that commit's tree, classified good, bad or
skip for the failure sought; repeated runs combined, and the rule that says when a commit has
run enough (`RunPlan`, pure: docs/bisect.md, "Repeated runs")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import outcome, variants
from harness.bisect.model import (
    EXPECTS,
    HAZARD,
    UNREPEATABLE,
    BisectOptions,
    Repeat,
    Setup,
    StepRecord,
    posterior_miss,
)
from harness.config.defaults import default_pin
from harness.config.pin import check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError, Interrupted
from harness.outcome import Kind
from harness.pipeline.options import RunOptions
from harness.pipeline.run import run_env
from harness.report.runs import RunRow, row_from_error, row_from_report
from harness.source.git import locate_checkout
from harness.source.gitrepo import CommitInfo, toplevel
from harness.stats import Rate, clean_runs_needed
from harness.vocab import AUTO, BisectClass, BisectRole, SourceKind

COMMIT = "commit"  # a bisect run's coordinate: the commit it built


def classify_run(
    kind: Kind, location: str | None, expect: str, want: str | None, hazard: str | None = None
) -> BisectClass:
    """pass → good; the expected failure (at `want`, if given) → bad; anything else → skip:
    a build failure or an unrelated failure says nothing about the failure sought. Under
    --expect hazard:… a run that showed the hazard is bad whatever its verdict (a host where
    it hangs too), and `want` is already part of the hazard sought."""
    if expect == HAZARD and hazard:
        return BisectClass.BAD
    if kind == Kind.PASS:
        return BisectClass.GOOD
    if kind in EXPECTS[expect] and (want is None or location == want):
        return BisectClass.BAD
    return BisectClass.SKIP


def combine(classes: Sequence[BisectClass]) -> BisectClass:
    """Bad if any run showed the failure, good only if every run passed, else skip."""
    if BisectClass.BAD in classes:
        return BisectClass.BAD
    if classes and all(c == BisectClass.GOOD for c in classes):
        return BisectClass.GOOD
    return BisectClass.SKIP


# ---------------------------------------------------------------- how many runs (pure)

# --repeat auto at the bad end: at least this many runs and failures before its rate counts
# (one failure in a few runs says little about the rate), within --repeat-cap
MIN_BAD_RUNS, MIN_BAD_FAILURES = 5, 2
# a good step makes the bad end's rate implausible: at most this chance that a commit failing
# at that rate would have passed all its clean runs
MISS_LEVEL = 0.05


def clean_target(bad_rate: Rate, cap: int) -> int | None:
    """The clean runs that make the bad end's failure rate implausible at 95%: under 5% of
    passing n runs in a row at its observed rate (`stats.clean_runs_needed`), and at most 5%
    over what its runs say the rate may be (`posterior_miss`: five runs do not pin a rate
    down, and simulated bisects trusting the observed rate alone were right less often than
    they said; at 2 failures in 5 runs it asks for 9 runs, not 6). None when more than `cap`
    would be needed."""
    n = clean_runs_needed(bad_rate.value, cap)
    if n is None:
        return None
    while posterior_miss(n, bad_rate) > MISS_LEVEL and n <= cap:
        n += 1
    return n if n <= cap else None


@dataclass(frozen=True)
class RunPlan:
    """How many runs one commit gets. `repeat` is N or "auto"; `bad_rate` is the bad end's
    observed rate (None while the bad end itself runs)."""

    repeat: Repeat
    cap: int
    bad_rate: Rate | None = None

    @property
    def target(self) -> int | None:
        """The clean runs that make a commit good: N, or under auto the rule's number (None:
        no rate known, or the cap is too low for it)."""
        if self.repeat != AUTO:
            return int(self.repeat)
        if self.bad_rate is None or not self.bad_rate.runs:
            return None
        return clean_target(self.bad_rate, self.cap)

    def miss(self, clean: int) -> float | None:
        """The chance that a commit failing like the bad end passes `clean` runs."""
        if self.bad_rate is None or not self.bad_rate.runs:
            return None
        return posterior_miss(clean, self.bad_rate)


def bad_end_done(classes: Sequence[BisectClass], plan: RunPlan) -> bool:
    """Whether the bad end has run enough. N: at its first failure (as a step) or after N
    runs; auto: at least MIN_BAD_RUNS runs with MIN_BAD_FAILURES failures, or the cap."""
    if plan.repeat != AUTO:
        return step_done(classes, plan)
    failures = sum(c == BisectClass.BAD for c in classes)
    enough = len(classes) >= MIN_BAD_RUNS and failures >= MIN_BAD_FAILURES
    return enough or len(classes) >= plan.cap


def step_done(classes: Sequence[BisectClass], plan: RunPlan) -> bool:
    """Whether a tested commit has run enough: bad at its first run that shows the failure;
    good after its target of clean runs; under auto, unsettled at the cap (docs/bisect.md)."""
    if classes and classes[-1] == BisectClass.BAD:
        return True
    if plan.repeat != AUTO:
        return len(classes) >= int(plan.repeat)
    target = plan.target
    clean = sum(c == BisectClass.GOOD for c in classes)
    return (target is not None and clean >= target) or len(classes) >= plan.cap


def setup_for(opts: BisectOptions) -> Setup:
    """Validate everything that does not depend on the commit: an error here is the user's,
    not a property of some commit (so bisect-step aborts instead of skipping)."""
    run = opts.run
    if opts.expect not in EXPECTS:
        raise HarnessError(f"--expect must be one of {', '.join(EXPECTS)}, not {opts.expect!r}")
    if opts.expect == HAZARD and run.expect_hazard is None:
        raise HarnessError("--expect hazard needs its kind: hazard:KIND[:LOCATION]")
    if opts.repeat not in (None, AUTO) and (not isinstance(opts.repeat, int) or opts.repeat < 1):
        raise HarnessError(f"--repeat must be a number of at least 1 or auto, not {opts.repeat}")
    if not 0.5 < opts.confidence < 1:
        raise HarnessError(f"--confidence must lie between 0.5 and 1, not {opts.confidence:g}")
    if opts.auto and opts.repeat_cap < MIN_BAD_RUNS:
        raise HarnessError(
            f"--repeat-cap must be at least {MIN_BAD_RUNS} (the bad end's fewest runs under "
            f"--repeat auto), not {opts.repeat_cap}"
        )
    scenario = load_scenario(run.scenario or run.env)
    pin = load_pin(run.pin or default_pin(run.checkout))
    if pin.source.kind != SourceKind.GIT:
        raise HarnessError(f"bisect needs a git pin; {pin.name} is a {pin.source.kind} source")
    check_env(pin, scenario.settings(pin.lineage).upstream_env)
    for spec in filter(None, (run.variant, opts.confirm_fix)):
        variants.parse_variant(spec, pin)
    root = toplevel(locate_checkout(pin, run.checkout))
    return Setup(opts, pin, root)


def _run_options(setup: Setup, sha: str, variant: str, report_dir: Path) -> RunOptions:
    return setup.opts.run.but(
        pin=str(setup.pin.file),
        variant=variant,
        report_dir=report_dir,
        checkout=setup.root,
        allow_drift=True,  # a commit's tree is identified by its hash, not the pin's hashes
        commit=sha,
    )


def run_once(setup: Setup, commit: CommitInfo, variant: str, report_dir: Path) -> RunRow:
    values = {COMMIT: commit.short}
    try:
        report, code = run_env(_run_options(setup, commit.sha, variant, report_dir))
    except HarnessError as exc:
        # setup_for validated everything global: what fails now is this commit's tree
        # (a variant that does not apply to it, a build tool it needs): untestable, skip
        return row_from_error(exc.message, exc.exit_code, values, variant)
    if code >= outcome.INTERRUPTED_BASE:
        raise Interrupted(code - outcome.INTERRUPTED_BASE)
    return row_from_report(report, code, values, variant)


def classify(row: RunRow, opts: BisectOptions) -> BisectClass:
    return classify_run(row.kind, row.location, opts.expect, opts.location, row.hazard)


def plan_for(opts: BisectOptions, bad_rate: Rate | None) -> RunPlan:
    # the posterior search runs one run at a time itself; a fix is confirmed in one run
    return RunPlan(1 if opts.repeat is None else opts.repeat, opts.repeat_cap, bad_rate)


def try_commit(
    setup: Setup,
    commit: CommitInfo,
    role: BisectRole,
    index: int,
    variant: str,
    report_dir: Path,
    bad_rate: Rate | None = None,
) -> StepRecord:
    """Run until the plan says enough (`step_done`; `bad_end_done` for the bad end): a step
    stops at the first run that shows the failure (bad is settled)."""
    plan = plan_for(setup.opts, bad_rate)
    done = bad_end_done if role is BisectRole.BAD_END else step_done
    runs: list[RunRow] = []
    classes: list[BisectClass] = []
    while not done(classes, plan):
        runs.append(run_once(setup, commit, variant, report_dir))
        classes.append(classify(runs[-1], setup.opts))
        if runs[-1].kind in UNREPEATABLE:
            break
    step = StepRecord(role, index, commit, variant, combine(classes), runs, classes)
    if step.classification == BisectClass.GOOD and role is not BisectRole.BAD_END:
        step.target = plan.target
        step.miss = plan.miss(len(runs))
    return step


# ---------------------------------------------------------------- the search


def expected(opts: BisectOptions) -> str:
    what = "any failure" if opts.expect == "any-failure" else opts.expect
    if opts.expect == HAZARD and opts.run.expect_hazard is not None:
        what = f"hazard {opts.run.expect_hazard.describe()}"
    return what + (f" in {opts.location}" if opts.location else "")


def shown(step: StepRecord) -> str:
    r = step.decisive
    if r.summary.startswith(r.kind):  # verdict summaries mostly name their kind already
        return r.summary
    where = f" in {r.location}" if r.location else ""
    return f"{r.kind}{where}: {r.summary}" if r.summary else f"{r.kind}{where}"
