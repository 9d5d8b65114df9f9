"""The search: check both ends, then a binary search over the first-parent candidates that
steps around untestable commits (the pure part is `Search.search`: it only sees
good/bad/skip); `bisect_step` is the `git bisect run` test of HEAD."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from harness.bisect import gitstep
from harness.bisect.adaptive import AdaptiveSearch
from harness.bisect.model import BisectOptions, BisectResult, StepRecord, save
from harness.bisect.render import render_markdown, steps_matrix
from harness.bisect.steps import expected, setup_for, shown, try_commit
from harness.errors import HarnessError, Interrupted
from harness.filenames import REPORT_MD
from harness.files import atomic_write
from harness.outcome import USAGE, BisectStepExit
from harness.report import store
from harness.report.matrix import publish, write_index
from harness.source.gitrepo import commit_info, diffstat, first_parent_range, is_ancestor, resolve
from harness.vocab import BisectClass, BisectRole, BisectStatus


def prepare(opts: BisectOptions) -> BisectResult:
    """Validate the options and the two ends; list the candidates. Nothing is built yet."""
    if not opts.good or not opts.bad:
        raise HarnessError("bisect needs both --good and --bad", USAGE)
    setup = setup_for(opts)
    root = setup.root
    good, bad = resolve(root, opts.good), resolve(root, opts.bad)
    if good == bad:
        raise HarnessError(f"--good and --bad are the same commit {good[:12]}: nothing to bisect")
    if not is_ancestor(root, good, bad):
        if is_ancestor(root, bad, good):
            raise HarnessError(
                f"--good and --bad are reversed: the bad end {bad[:12]} is an ancestor of the "
                f"good end {good[:12]} (swap --good and --bad)"
            )
        raise HarnessError(
            f"the good end {good[:12]} is not an ancestor of the bad end {bad[:12]}: "
            "there is no single history between them"
        )
    candidates = first_parent_range(root, good, bad)
    run_id = store.new_run_id(f"bisect-{opts.run.env}")
    return BisectResult(
        run_id,
        opts.run.report_dir / run_id,
        setup,
        commit_info(root, good),
        candidates[-1],
        candidates,
    )


class Search:
    """The binary search over a first-parent range: `test` runs (or recalls) one commit,
    `search` narrows the range around untestable commits. Public: triage's History
    subclasses it to answer commits it already tested while searching back."""

    def __init__(self, result: BisectResult) -> None:
        self.result = result
        self.setup = result.setup
        self.tested: dict[int, StepRecord] = {}

    def test(self, index: int, role: BisectRole) -> StepRecord:
        res = self.result
        commit = res.good if index < 0 else res.candidates[index]
        number = len(res.search_steps) + 1
        self.setup.opts.run.progress.label = (
            f"harness bisect {self.setup.opts.run.env} [step {number} of at most "
            f"{res.step_bound}: {role} {commit.short} {commit.subject[:40]}]"
        )
        step = try_commit(
            self.setup,
            commit,
            role,
            index,
            self.setup.opts.run.variant,
            res.directory / "steps",
            res.bad_rate,  # None while the bad end itself runs
        )
        res.steps.append(step)
        self.tested[index] = step
        save(res)
        return step

    def check_ends(self) -> None:
        """The bad end first: if the failure does not reproduce there, nothing else matters."""
        res, opts = self.result, self.setup.opts
        bad = self.test(len(res.candidates) - 1, BisectRole.BAD_END)
        if bad.classification == BisectClass.GOOD:
            runs = f" (all {len(bad.runs)} runs passed)" if len(bad.runs) > 1 else ""
            raise HarnessError(
                f"the bad end {res.bad.short} passed: nothing to bisect{runs}", USAGE
            )
        if bad.classification == BisectClass.SKIP:
            raise HarnessError(
                f"the bad end {res.bad.short} does not show the expected failure "
                f"({expected(opts)}): it showed {shown(bad)}",
                USAGE,
            )
        good = self.test(-1, BisectRole.GOOD_END)
        if good.classification == BisectClass.BAD:
            raise HarnessError(
                f"the good end {res.good.short} shows the failure ({shown(good)}): "
                "pick an older --good",
                USAGE,
            )
        if good.classification == BisectClass.SKIP:
            raise HarnessError(
                f"the good end {res.good.short} is not good: it showed {shown(good)}", USAGE
            )

    def search(self) -> None:
        """Binary search over the candidates with skips. Invariant: `lo` is good (-1: the good
        end), `hi` bad. Each probe is the median of the untested, unskipped candidates, so
        a skip moves the next probe to the nearest neighbour, alternately on either side,
        and a decisive probe halves the commits left: ⌈log2 N⌉ decisive probes at most."""
        lo, hi = -1, len(self.result.candidates) - 1
        skipped: set[int] = set()
        while pool := [i for i in range(lo + 1, hi) if i not in skipped]:
            probe = pool[(len(pool) + 1) // 2 - 1]
            cls = self.test(probe, BisectRole.SEARCH).classification
            if cls == BisectClass.BAD:
                hi = probe
            elif cls == BisectClass.GOOD:
                lo = probe
            else:
                skipped.add(probe)
        self.conclude(lo, hi, sorted(i for i in skipped if lo < i < hi))

    def conclude(self, lo: int, hi: int, skipped: list[int]) -> None:
        res = self.result
        if skipped:  # untestable commits hide where the failure came in: a range, like git
            res.status = BisectStatus.RANGE
            res.possible = [res.candidates[i] for i in [*skipped, hi]]
            return
        res.status = BisectStatus.FOUND
        res.first_bad, res.parent = self.tested[hi], self.tested[lo]
        res.diffstat = diffstat(self.setup.root, res.first_bad.commit.sha)

    def confirm(self, variant: str) -> None:
        res = self.result
        assert res.first_bad is not None
        bad = res.first_bad
        step = try_commit(
            self.setup,
            bad.commit,
            BisectRole.CONFIRM_FIX,
            bad.index,
            variant,
            res.directory / "steps",
            res.bad_rate,
        )
        res.steps.append(step)
        res.confirm = step
        save(res)


def bisect(opts: BisectOptions) -> BisectResult:
    """Find the first bad commit between opts.good and opts.bad (see the module doc)."""
    result = prepare(opts)
    save(result)
    search = Search(result)
    try:
        if opts.adaptive:
            AdaptiveSearch(result).search()
        else:
            search.check_ends()
            search.search()
        if opts.confirm_fix and result.first_bad is not None:
            search.confirm(opts.confirm_fix)
    except HarnessError as exc:
        result.error = exc.message
        finish(result, BisectStatus.FAILED)
        raise
    except (Interrupted, KeyboardInterrupt):
        finish(result, BisectStatus.INTERRUPTED)
        raise
    finish(result, result.status)
    return result


def bisect_step(opts: BisectOptions) -> int:
    """`git bisect run harness bisect-step ENV …`: test the checkout's HEAD (the checkout is
    --checkout, else the current folder). 0 good, 1 bad, 125 skip, 255 abort (a usage error:
    it would be wrong to call every commit bad because of a typo)."""
    checkout = opts.run.checkout or Path.cwd()
    try:
        if opts.auto:  # its rule needs the bad end's rate, which only `harness bisect` runs
            raise HarnessError(
                "--repeat auto needs the bad end's failure rate, which bisect-step never sees: "
                "give --repeat N (or use harness bisect --repeat auto)"
            )
        setup = setup_for(replace(opts, run=opts.run.but(checkout=checkout)))
        head = commit_info(setup.root, resolve(setup.root, "HEAD"))
    except HarnessError as exc:
        print(f"harness bisect-step: error: {exc.message} (aborting)", file=sys.stderr)
        return BisectStepExit.ABORT
    frame = gitstep.frame_of(setup.root) if opts.adaptive else None
    if frame is not None and frame.position(head.sha) is not None:
        try:
            cls, why = gitstep.decide(setup, frame, head, opts.run.report_dir)
        except HarnessError as exc:
            print(f"harness bisect-step: error: {exc.message} (aborting)", file=sys.stderr)
            return BisectStepExit.ABORT
        code = BisectStepExit[cls.name]
        print(
            f"harness bisect-step: {head.short} {head.subject}: → {cls} (exit {code}; "
            f"posterior: {why})",
            file=sys.stderr,
        )
        return code
    if opts.adaptive:
        where = "no bisect under way" if frame is None else "HEAD is off the first-parent line"
        print(
            f"harness bisect-step: {where} (git bisect start --first-parent keeps it on): "
            "one run decides, as with --repeat 1",
            file=sys.stderr,
        )
    step = try_commit(setup, head, BisectRole.STEP, 0, opts.run.variant, opts.run.report_dir)
    code = BisectStepExit[step.classification.name]
    counts = step.counts()
    print(
        f"harness bisect-step: {head.short} {head.subject}: {shown(step)} → "
        f"{step.classification} (exit {code}; runs {counts['runs']}, "
        f"bad {counts[BisectClass.BAD]}, good {counts[BisectClass.GOOD]}, "
        f"skip {counts[BisectClass.SKIP]}; report {step.decisive.report_dir})",
        file=sys.stderr,
    )
    return code


def finish(result: BisectResult, status: BisectStatus) -> None:
    """report.md, index.html (every step linked to its run's report), the step summary
    under GitHub Actions, and report.json last."""
    result.status = status
    result.finished = time.time()
    atomic_write(result.directory / REPORT_MD, render_markdown(result))
    steps = steps_matrix(result)
    write_index(steps, result.directory)
    publish(steps)
    save(result)
