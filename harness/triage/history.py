"""History: the first bad commit of a git source (docs/triage.md, "History").

With `--good`, a bisect between it and the bad end. Without it, a search back along the bad
end's first-parent line for a passing commit: the pin's `[triage] known_good` refs first,
then 1, 2, 4, 8 … commits back, to the root at most; then a bisect from the passing commit
to the bad end that starts at the nearest failing commit found on the way. Every commit is
tested as `harness bisect` tests it (bisect.steps.try_commit: the same good/bad/skip rules,
the same build cache), for the failure the Reproduce step saw (its kind at its location);
the commits tested while searching back are not run again by the bisect. Before each commit
the budget left must cover one commit's test (the slowest seen so far, or a prior from the
Reproduce step); a budget that ends the search leaves what was learned, never an error.
What is sought is read in `history_sought`; the commits tested are kept in `history_hunt`.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.bisect.model import BisectOptions, BisectResult, StepRecord, save
from harness.bisect.search import finish, prepare
from harness.bisect.steps import expected, setup_for, shown
from harness.config.defaults import default_pin
from harness.config.pin import Pin, load_pin
from harness.errors import HarnessError, Interrupted
from harness.report.live import LiveProgress
from harness.report.load import load_report
from harness.source.blame import HangBlame
from harness.source.gitrepo import (
    HISTORY_TIMEOUT_S,
    CommitInfo,
    commit_info,
    git_result,
    is_ancestor,
    resolve,
)
from harness.stats import Rate
from harness.triage import history_sought as sought
from harness.triage.history_hunt import Hunt, OutOfBudget, ReusingBisect
from harness.triage.model import Step, TriageOptions, TriageResult
from harness.triage.results import FirstBad, HistoryResult, ReproduceResult
from harness.vocab import (
    BisectClass,
    BisectRole,
    BisectStatus,
    HistoryEnd,
    SourceKind,
    StepStatus,
    TriageStep,
)


def history_step(
    opts: TriageOptions, result: TriageResult, budget_left_s: float, progress: LiveProgress
) -> Step:
    """The History step (see the module doc). Never raises for the budget; a git or setup
    error is a FAILED step with its one line; an interruption propagates (the bisect's
    report is finished first, as `harness bisect` does)."""
    step = Step(TriageStep.HISTORY)
    started = time.monotonic()
    try:
        _run(step, opts, result, budget_left_s, progress)
    except HarnessError as exc:
        step.status, step.reason = StepStatus.FAILED, exc.message
    step.duration_s = round(time.monotonic() - started, 3)
    return step


def _run(
    step: Step, opts: TriageOptions, result: TriageResult, budget_s: float, progress: LiveProgress
) -> None:
    run = opts.run
    pin = load_pin(run.pin or default_pin(run.checkout))
    if pin.source.kind is not SourceKind.GIT:
        step.status = StepStatus.SKIPPED
        step.reason = f"no git source: pin {pin.name} is a {pin.source.kind} source"
        return
    found = sought.reproduce(result)
    hazard = sought.hazard_sought(found)
    if (
        found != ReproduceResult()
        and not (result.reproduced or found.failures or found.first_failure)
        and hazard is None
    ):
        step.status = StepStatus.SKIPPED
        step.reason = "the failure did not reproduce here: no first bad commit to look for"
        return
    expect, where, repeat = sought.expectation(found)
    run = sought.run_options(opts, found, progress)
    if hazard is not None:  # nothing failed here: the commit that brought the hazard in
        expect, where, repeat = "hazard", None, 1
        run = run.but(hazards=True, expect_hazard=hazard)
    folder = result.directory / "steps" / "history"
    bopts = BisectOptions(
        run=run.but(report_dir=folder),
        expect=expect,
        location=where,
        repeat=repeat,
        repeat_cap=opts.repeat_cap,
    )
    deadline = time.monotonic() + budget_s
    hunt = Hunt(setup_for(bopts), deadline, sought.prior_s(result), progress, folder / "search")
    if not hunt.fits():
        step.status = StepStatus.SKIPPED
        step.reason = (
            f"the budget left ({budget_s:.0f} s) is less than one commit's test "
            f"(~{hunt.estimate_s:.0f} s)"
        )
        return
    root = hunt.setup.root
    bad = commit_info(root, sought.bad_end(opts, pin, root))
    step.status = StepStatus.DONE
    step.result = HistoryResult(bad=bad.sha, expect=expected(bopts), repeat=repeat)
    try:
        _hunt(step, opts, pin, hunt, bad)
    finally:
        _count(step, hunt, result)


def _found(step: Step, **changes: Any) -> None:
    """The History result with `changes` (History learns its result a piece at a time)."""
    step.result = replace(step.found(HistoryResult), **changes)


def _hunt(step: Step, opts: TriageOptions, pin: Pin, hunt: Hunt, bad: CommitInfo) -> None:
    root, bopts = hunt.setup.root, hunt.setup.opts
    hunt.label(f"the bad end {bad.short}")
    try:
        end = hunt.note(hunt.test(bad, BisectRole.BAD_END), "bad end", 0)
    except OutOfBudget:
        step.status, step.reason = StepStatus.SKIPPED, "the budget ran out before the bad end ran"
        return
    if end.classification == BisectClass.GOOD:
        _found(step, status=HistoryEnd.NOT_REPRODUCED)
        step.headline = (
            f"the bad end {bad.short} passed here ({len(end.runs)} runs): nothing to search"
        )
        return
    if end.classification != BisectClass.BAD:
        raise HarnessError(
            f"the bad end {bad.short} does not show the failure sought ({expected(bopts)}): "
            f"it showed {shown(end)}"
        )
    c = end.counts()
    hunt.bad_rate = Rate(c[BisectClass.BAD], c[BisectClass.BAD] + c[BisectClass.GOOD])
    good, how = None, ""
    if opts.good:
        good, how = commit_info(root, resolve(root, opts.good)), "given"
    else:
        try:
            good, how = _search_back(hunt, pin, bad)
        except OutOfBudget:  # skipped, not done: `--resume` takes it up again
            how = step.reason = "the budget ran out"
            step.status = StepStatus.SKIPPED
        if good is None:
            _found(step, status=HistoryEnd.NO_GOOD)
            deepest = max((s.back or 0 for s in hunt.searched), default=0)
            step.headline = f"no passing commit within {deepest} commits back; {how}"
            return
    _found(step, good=good.sha, good_how=how)
    hunt.label(f"bisect {good.short}..{bad.short}")
    res = prepare(replace(bopts, good=good.sha, bad=bad.sha))
    _found(step, folder=str(Path("steps", "history", res.directory.name)))  # in the triage folder
    _bisect(step, res, hunt)


def _search_back(hunt: Hunt, pin: Pin, bad: CommitInfo) -> tuple[CommitInfo | None, str]:
    """The pin's known-good refs first (each an ancestor of the bad end), then 1, 2, 4 …
    commits back along the first-parent line, the root last. (good or None, how)."""
    root = hunt.setup.root
    refs = pin.triage.known_good
    for ref in refs:
        try:
            sha = resolve(root, str(ref))
        except HarnessError:
            continue  # a ref this checkout does not have (a tag not fetched)
        if sha == bad.sha or not is_ancestor(root, sha, bad.sha):
            continue
        hunt.label(f"known good {ref}")
        rec = hunt.test(commit_info(root, sha), BisectRole.SEARCH)
        hunt.note(rec, f"known_good ref {ref}")
        if rec.classification == BisectClass.GOOD:
            return rec.commit, f"known_good ref {ref}"
    depth = sought.first_parent_depth(root, bad.sha)
    distance = 1
    while distance <= depth:
        commit = commit_info(root, resolve(root, f"{bad.sha}~{distance}"))
        hunt.label(f"{distance} back: {commit.short} {commit.subject[:40]}")
        rec = hunt.note(hunt.test(commit, BisectRole.SEARCH), f"{distance} back", distance)
        if rec.classification == BisectClass.GOOD:
            return rec.commit, f"searched back {distance} commits"
        if distance == depth:
            break
        distance = min(distance * 2, depth)
    return None, f"the root ({depth} commits back) was reached"


def _bisect(step: Step, res: BisectResult, hunt: Hunt) -> None:
    save(res)
    search = ReusingBisect(res, hunt)
    try:
        search.check_ends()
        search.search()
    except OutOfBudget:
        res.status = BisectStatus.RANGE
        res.possible = [res.candidates[i] for i in range(search.lo + 1, search.hi + 1)]
        finish(res, res.status)
        step.reason = "the budget ran out during the bisect"
        step.status = StepStatus.SKIPPED  # what it learned stays in the result; resume redoes it
    except HarnessError as exc:
        res.error = exc.message
        finish(res, BisectStatus.FAILED)
        raise
    except (Interrupted, KeyboardInterrupt):
        finish(res, BisectStatus.INTERRUPTED)
        raise
    else:
        finish(res, res.status)
    _found(step, status=res.status)
    if res.confidence is not None and res.setup.opts.repeat != 1:
        _found(step, confidence=round(res.confidence, 6))
    if res.status is BisectStatus.FOUND and res.first_bad is not None:
        fb = _first_bad(res)
        _found(step, first_bad=fb)
        stat = fb.diffstat
        where = f" ({stat})" if stat and "\n" not in stat else ""
        step.headline = f'first bad commit {fb.sha[:12]} "{fb.subject}"{where}'
    else:
        _found(step, possible=tuple(c.sha for c in res.possible))
        listed = ", ".join(c.short for c in res.possible[:6])
        more = f" … ({len(res.possible)} commits)" if len(res.possible) > 6 else ""
        why = f"; {step.reason}" if step.reason else ""
        step.headline = f"the first bad commit is one of {listed}{more}{why}"


def _first_bad(res: BisectResult) -> FirstBad:
    assert res.first_bad is not None
    c, root = res.first_bad.commit, res.setup.root
    blame = _run_blame(res.first_bad)
    diffstat = res.diffstat
    if blame is not None and blame.file:
        file = blame.file
        args = ("diff", "--numstat", "--no-ext-diff", "--no-textconv", f"{c.sha}^1", c.sha)
        res_ = git_result(root, *args, "--", file, timeout=HISTORY_TIMEOUT_S)
        numstat = res_.stdout.split()
        # added and removed lines of the located file ("-" for a binary file)
        diffstat = f"{file} +{numstat[0]} -{numstat[1]}" if numstat else f"{file}: unchanged"
    return FirstBad(c.sha, c.subject, c.author, c.date, diffstat, blame)


def _run_blame(rec: StepRecord) -> HangBlame | None:
    """The located line's blame from the decisive run's report (the run blames the hang's
    line at the commit it built), or None."""
    run_dir = rec.decisive.report_dir
    if run_dir is None:
        return None
    try:
        verdict = load_report(Path(run_dir)).verdict
    except HarnessError:
        return None
    return verdict.blame if verdict is not None else None


def _count(step: Step, hunt: Hunt, result: TriageResult) -> None:
    runs = [r for rec in hunt.made for r in rec.runs]
    step.runs_made = len(runs)
    step.builds_made = sum(bool(r.build_key) and not r.cache_hit for r in runs)
    if isinstance(step.result, HistoryResult):  # the commits tested, as far as it got
        _found(step, searched=tuple(hunt.searched))
    found = step.found(HistoryResult)
    dirs = [os.path.relpath(r.report_dir, result.directory) for r in runs if r.report_dir]
    step.runs = ([found.folder] if found.folder else []) + dirs
    first_bad = found.first_bad
    if first_bad is not None:
        result.first_bad = first_bad.sha
