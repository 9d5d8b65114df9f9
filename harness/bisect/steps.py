"""Testing one commit: a normal harness run of that commit's tree, classified good, bad or
skip for the failure sought; repeated runs combined."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness import outcome, variants
from harness.bisect.model import (
    BAD,
    EXPECTS,
    GOOD,
    SKIP,
    UNREPEATABLE,
    BisectOptions,
    Setup,
    StepRecord,
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
from harness.vocab import BisectRole, SourceKind

COMMIT = "commit"  # a bisect run's coordinate: the commit it built


def classify_run(kind: Kind, location: str | None, expect: str, want: str | None) -> str:
    """pass → good; the expected failure (at `want`, if given) → bad; anything else → skip:
    a build failure or an unrelated failure says nothing about the failure sought."""
    if kind == Kind.PASS:
        return GOOD
    if kind in EXPECTS[expect] and (want is None or location == want):
        return BAD
    return SKIP


def combine(classes: Sequence[str]) -> str:
    """Bad if any run showed the failure, good only if every run passed, else skip."""
    if BAD in classes:
        return BAD
    if classes and all(c == GOOD for c in classes):
        return GOOD
    return SKIP


def setup_for(opts: BisectOptions) -> Setup:
    """Validate everything that does not depend on the commit: an error here is the user's,
    not a property of some commit (so bisect-step aborts instead of skipping)."""
    run = opts.run
    if opts.expect not in EXPECTS:
        raise HarnessError(f"--expect must be one of {', '.join(EXPECTS)}, not {opts.expect!r}")
    if opts.repeat < 1:
        raise HarnessError(f"--repeat must be at least 1, not {opts.repeat}")
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


def classify(row: RunRow, opts: BisectOptions) -> str:
    return classify_run(row.kind, row.location, opts.expect, opts.location)


def try_commit(
    setup: Setup,
    commit: CommitInfo,
    role: BisectRole,
    index: int,
    variant: str,
    report_dir: Path,
) -> StepRecord:
    """Up to --repeat runs; stop at the first that shows the failure (bad is settled)."""
    runs: list[RunRow] = []
    classes: list[str] = []
    for _ in range(setup.opts.repeat):
        runs.append(run_once(setup, commit, variant, report_dir))
        classes.append(classify(runs[-1], setup.opts))
        if classes[-1] == BAD or runs[-1].kind in UNREPEATABLE:
            break
    return StepRecord(role, index, commit, variant, combine(classes), runs, classes)


# ---------------------------------------------------------------- the search


def expected(opts: BisectOptions) -> str:
    what = "any failure" if opts.expect == "any-failure" else opts.expect
    return what + (f" in {opts.location}" if opts.location else "")


def shown(step: StepRecord) -> str:
    r = step.decisive
    if r.summary.startswith(r.kind):  # verdict summaries mostly name their kind already
        return r.summary
    where = f" in {r.location}" if r.location else ""
    return f"{r.kind}{where}: {r.summary}" if r.summary else f"{r.kind}{where}"
