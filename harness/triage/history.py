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
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.bisect.model import (
    AUTO,
    BAD,
    GOOD,
    BisectOptions,
    BisectResult,
    Repeat,
    Setup,
    StepRecord,
)
from harness.bisect.search import Search, finish, prepare, save
from harness.bisect.steps import expected, setup_for, shown, try_commit
from harness.config.defaults import default_pin
from harness.config.hostprofile import load_host
from harness.config.pin import UNVERIFIED, Pin, load_pin
from harness.errors import HarnessError, Interrupted
from harness.execute.conditions import HostConditions
from harness.pipeline.options import RunOptions
from harness.report.live import LiveProgress
from harness.report.reading import read_report_json
from harness.source.gitrepo import (
    HISTORY_TIMEOUT_S,
    CommitInfo,
    commit_info,
    git_result,
    head_commit,
    is_ancestor,
    resolve,
)
from harness.stats import Rate
from harness.triage.model import Step, StepName, StepStatus, TriageOptions, TriageResult
from harness.vocab import BisectRole, BisectStatus, SourceKind

PRIOR_COMMIT_S = 30.0  # one commit's test (build + run) before any was timed here
# the Reproduce step's verdict kind → what makes a commit bad (bisect's --expect)
EXPECT_OF = {
    "hang": "hang",
    "crash": "crash",
    "error-exit": "crash",
    "check-failed": "check-failed",
}
NOT_REPRODUCED, NO_GOOD = "not-reproduced", "no-good"  # result["status"] besides bisect's


class _OutOfBudget(Exception):
    """The budget left does not cover one more commit's test."""


@dataclass
class _Hunt:
    """The commits tested so far (by sha), the time left, and what one test costs."""

    setup: Setup
    deadline: float
    estimate_s: float
    progress: LiveProgress
    back: Path  # the search back's run folders
    known: dict[str, StepRecord] = field(default_factory=dict)
    made: list[StepRecord] = field(default_factory=list)  # tested here, in order
    searched: list[dict[str, Any]] = field(default_factory=list)  # result["searched"]
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
            raise _OutOfBudget
        started = time.monotonic()
        variant = self.setup.opts.run.variant
        rec = try_commit(self.setup, commit, role, 0, variant, self.back, self.bad_rate)
        self.record(rec, started)
        return rec

    def note(self, rec: StepRecord, how: str, back: int | None = None) -> StepRecord:
        row = {"sha": rec.commit.sha, "classification": rec.classification, "how": how}
        self.searched.append(row if back is None else {**row, "back": back})
        return rec

    def record(self, rec: StepRecord, started: float) -> None:
        self.known[rec.commit.sha] = rec
        self.made.append(rec)
        # the slowest commit seen: a hang costs its startup window and sampling, a pass an
        # epoch; the prior is only a guess until one was timed here
        self.timed.append(time.monotonic() - started)
        self.estimate_s = max(self.timed)


class _Bisect(Search):
    """bisect.search's search, told what the search back already learned: a commit tested
    there is answered from its record (relabelled), and the search starts at the nearest
    failing commit found. `lo`/`hi`/`skipped` are kept so a budget that ends the search
    still gives the range left."""

    def __init__(self, result: BisectResult, hunt: _Hunt) -> None:
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
                raise _OutOfBudget
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
        bads = [i for i, c in enumerate(cands[:-1]) if _is(self.hunt.known.get(c.sha), BAD)]
        if bads:  # the nearest failing commit of the search back: nothing above it matters
            self.hi = min(bads)
            self.test(self.hi, BisectRole.SEARCH)
        while pool := [i for i in range(self.lo + 1, self.hi) if i not in self.skipped]:
            probe = pool[(len(pool) + 1) // 2 - 1]  # as bisect.search: the median
            cls = self.test(probe, BisectRole.SEARCH).classification
            if cls == BAD:
                self.hi = probe
            elif cls == GOOD:
                self.lo = probe
            else:
                self.skipped.add(probe)
        self.conclude(self.lo, self.hi, sorted(i for i in self.skipped if self.lo < i < self.hi))


def _is(rec: StepRecord | None, cls: str) -> bool:
    return rec is not None and rec.classification == cls


# ---------------------------------------------------------------- what to look for


def _reproduce(result: TriageResult) -> dict[str, Any]:
    """What the Reproduce step found (triage/steps.py's keys), or nothing when it is not done."""
    rep = next((s for s in result.steps if s.name is StepName.REPRODUCE), None)
    return rep.result if rep is not None and rep.status is StepStatus.DONE else {}


def _expectation(found: dict[str, Any]) -> tuple[str, str | None, Repeat]:
    """bisect's --expect, --location and --repeat from the Reproduce step: its kind at its
    location; one run per commit when every run reproduced, else `auto` (a sometimes-hang
    passes a bad commit by luck)."""
    expect = EXPECT_OF.get(str(found.get("kind")), "any-failure")
    where = found.get("location")
    fails, runs = found.get("failures"), found.get("ran", found.get("runs"))
    flaky = isinstance(fails, int) and isinstance(runs, int) and 0 < fails < runs
    return expect, where if isinstance(where, str) and where else None, AUTO if flaky else 1


def _prior_s(result: TriageResult) -> float:
    """One commit's test before any was timed here: a build and a run as Reproduce timed
    them (every commit builds anew), else its time per run."""
    found, rep = _reproduce(result), result.step(StepName.REPRODUCE)
    run_s, build_s = found.get("run_s"), found.get("build_s")
    if isinstance(run_s, int | float) and run_s > 0:
        return float(run_s) + (float(build_s) if isinstance(build_s, int | float) else 0.0)
    if rep.duration_s and rep.runs_made:
        return max(1.0, rep.duration_s / rep.runs_made)
    return PRIOR_COMMIT_S


def _run_options(opts: TriageOptions, found: dict[str, Any], progress: LiveProgress) -> RunOptions:
    """The triage's run, under the host profile Reproduce had to use (if any), as every
    other step runs it."""
    run = opts.run.but(progress=progress)
    host = found.get("host")
    if isinstance(host, str) and host:
        profile = HostConditions.from_profile(load_host(host))
        run = run.but(conditions=profile.merged(opts.run.conditions))
    return run


def _bad_end(opts: TriageOptions, pin: Pin, root: Path) -> str:
    """--bad, else the pin's commit (an UNVERIFIED:<short> prefix too) where the checkout
    has it, else the checkout's HEAD."""
    if opts.bad:
        return resolve(root, opts.bad)
    pinned = (
        pin.source.commit.split(":", 1)[-1]
        if pin.source.commit.startswith(UNVERIFIED)
        else pin.source.commit
    )
    if pinned:
        try:
            return resolve(root, pinned)
        except HarnessError:
            pass  # the checkout does not have it: what it has checked out is what was run
    return head_commit(root, timeout=HISTORY_TIMEOUT_S)


def _first_parent_depth(root: Path, sha: str) -> int:
    """Commits on `sha`'s first-parent line below it (the root's distance back)."""
    out = git_result(root, "rev-list", "--first-parent", "--count", sha, timeout=HISTORY_TIMEOUT_S)
    return int(out.stdout.strip()) - 1


# ---------------------------------------------------------------- the step


def history_step(
    opts: TriageOptions, result: TriageResult, budget_left_s: float, progress: LiveProgress
) -> Step:
    """The History step (see the module doc). Never raises for the budget; a git or setup
    error is a FAILED step with its one line; an interruption propagates (the bisect's
    report is finished first, as `harness bisect` does)."""
    step = Step(StepName.HISTORY)
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
    found = _reproduce(result)
    if found and not (result.reproduced or found.get("failures") or found.get("first_failure")):
        step.status = StepStatus.SKIPPED
        step.reason = "the failure did not reproduce here: no first bad commit to look for"
        return
    expect, where, repeat = _expectation(found)
    folder = result.directory / "steps" / "history"
    bopts = BisectOptions(
        run=_run_options(opts, found, progress).but(report_dir=folder),
        expect=expect,
        location=where,
        repeat=repeat,
        repeat_cap=opts.repeat_cap,
    )
    deadline = time.monotonic() + budget_s
    hunt = _Hunt(setup_for(bopts), deadline, _prior_s(result), progress, folder / "search")
    if not hunt.fits():
        step.status = StepStatus.SKIPPED
        step.reason = (
            f"the budget left ({budget_s:.0f} s) is less than one commit's test "
            f"(~{hunt.estimate_s:.0f} s)"
        )
        return
    root = hunt.setup.root
    bad = commit_info(root, _bad_end(opts, pin, root))
    step.status = StepStatus.DONE
    out: dict[str, Any] = {"bad": bad.sha, "expect": expected(bopts), "repeat": repeat}
    out["searched"] = hunt.searched
    step.result = out
    try:
        _hunt(step, opts, pin, hunt, bad)
    finally:
        _count(step, hunt, result)


def _hunt(step: Step, opts: TriageOptions, pin: Pin, hunt: _Hunt, bad: CommitInfo) -> None:
    out, root, bopts = step.result, hunt.setup.root, hunt.setup.opts
    hunt.label(f"the bad end {bad.short}")
    try:
        end = hunt.note(hunt.test(bad, BisectRole.BAD_END), "bad end", 0)
    except _OutOfBudget:
        step.status, step.reason = StepStatus.SKIPPED, "the budget ran out before the bad end ran"
        return
    if end.classification == GOOD:
        out["status"] = NOT_REPRODUCED
        step.headline = (
            f"the bad end {bad.short} passed here ({len(end.runs)} runs): nothing to search"
        )
        return
    if end.classification != BAD:
        raise HarnessError(
            f"the bad end {bad.short} does not show the failure sought ({expected(bopts)}): "
            f"it showed {shown(end)}"
        )
    c = end.counts()
    hunt.bad_rate = Rate(c[BAD], c[BAD] + c[GOOD])
    good, how = None, ""
    if opts.good:
        good, how = commit_info(root, resolve(root, opts.good)), "given"
    else:
        try:
            good, how = _search_back(hunt, pin, bad)
        except _OutOfBudget:  # skipped, not done: `--resume` takes it up again
            how = step.reason = "the budget ran out"
            step.status = StepStatus.SKIPPED
        if good is None:
            out["status"] = NO_GOOD
            deepest = max((int(s.get("back", 0)) for s in hunt.searched), default=0)
            step.headline = f"no passing commit within {deepest} commits back; {how}"
            return
    out["good"], out["good_how"] = good.sha, how
    hunt.label(f"bisect {good.short}..{bad.short}")
    res = prepare(replace(bopts, good=good.sha, bad=bad.sha))
    out["folder"] = str(Path("steps", "history", res.directory.name))  # in the triage folder
    _bisect(step, res, hunt)


def _search_back(hunt: _Hunt, pin: Pin, bad: CommitInfo) -> tuple[CommitInfo | None, str]:
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
        if rec.classification == GOOD:
            return rec.commit, f"known_good ref {ref}"
    depth = _first_parent_depth(root, bad.sha)
    distance = 1
    while distance <= depth:
        commit = commit_info(root, resolve(root, f"{bad.sha}~{distance}"))
        hunt.label(f"{distance} back: {commit.short} {commit.subject[:40]}")
        rec = hunt.note(hunt.test(commit, BisectRole.SEARCH), f"{distance} back", distance)
        if rec.classification == GOOD:
            return rec.commit, f"searched back {distance} commits"
        if distance == depth:
            break
        distance = min(distance * 2, depth)
    return None, f"the root ({depth} commits back) was reached"


def _bisect(step: Step, res: BisectResult, hunt: _Hunt) -> None:
    out = step.result
    save(res)
    search = _Bisect(res, hunt)
    try:
        search.check_ends()
        search.search()
    except _OutOfBudget:
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
    out["status"] = str(res.status)
    if res.confidence is not None and res.setup.opts.repeat != 1:
        out["confidence"] = round(res.confidence, 6)
    if res.status is BisectStatus.FOUND and res.first_bad is not None:
        out["first_bad"] = _first_bad(res)
        fb = out["first_bad"]
        stat = str(fb["diffstat"])
        where = f" ({stat})" if stat and "\n" not in stat else ""
        step.headline = f'first bad commit {fb["sha"][:12]} "{fb["subject"]}"{where}'
    else:
        out["possible"] = [c.sha for c in res.possible]
        listed = ", ".join(c.short for c in res.possible[:6])
        more = f" … ({len(res.possible)} commits)" if len(res.possible) > 6 else ""
        why = f"; {step.reason}" if step.reason else ""
        step.headline = f"the first bad commit is one of {listed}{more}{why}"


def _first_bad(res: BisectResult) -> dict[str, Any]:
    assert res.first_bad is not None
    c, root = res.first_bad.commit, res.setup.root
    blame = _run_blame(res.first_bad)
    info: dict[str, Any] = {"sha": c.sha, "subject": c.subject, "author": c.author, "date": c.date}
    file = blame.get("file") if blame else None
    if isinstance(file, str) and file:
        args = ("diff", "--numstat", "--no-ext-diff", "--no-textconv", f"{c.sha}^1", c.sha)
        res_ = git_result(root, *args, "--", file, timeout=HISTORY_TIMEOUT_S)
        numstat = res_.stdout.split()
        # added and removed lines of the located file ("-" for a binary file)
        info["diffstat"] = (
            f"{file} +{numstat[0]} -{numstat[1]}" if numstat else f"{file}: unchanged"
        )
    else:
        info["diffstat"] = res.diffstat
    info["blame"] = blame
    return info


def _run_blame(rec: StepRecord) -> dict[str, Any] | None:
    """The located line's blame from the decisive run's report.json (the run blames the
    hang's line at the commit it built), or None."""
    run_dir = rec.decisive.report_dir
    if run_dir is None:
        return None
    try:
        data = read_report_json(Path(run_dir))[1]
    except HarnessError:
        return None
    blame = (data.get("verdict") or {}).get("blame")
    return blame if isinstance(blame, dict) else None


def _count(step: Step, hunt: _Hunt, result: TriageResult) -> None:
    runs = [r for rec in hunt.made for r in rec.runs]
    step.runs_made = len(runs)
    step.builds_made = sum(bool(r.build_key) and not r.cache_hit for r in runs)
    folder = step.result.get("folder")
    dirs = [os.path.relpath(r.report_dir, result.directory) for r in runs if r.report_dir]
    step.runs = ([folder] if folder else []) + dirs
    if step.result.get("first_bad"):
        result.first_bad = step.result["first_bad"]["sha"]
