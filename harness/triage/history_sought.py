"""What History looks for, and where it starts: the failure the Reproduce step saw (bisect's
--expect, --location and --repeat), the run it is sought under (Reproduce's host profile), a
prior for one commit's test, and the bad end and how far back its first-parent line goes.
"""

from __future__ import annotations

from pathlib import Path

from harness.bisect.model import Repeat
from harness.config.hostprofile import load_host
from harness.config.pin import UNVERIFIED, Pin
from harness.errors import HarnessError
from harness.execute.conditions import HostConditions
from harness.hazards.expect import HazardExpect
from harness.pipeline.options import RunOptions
from harness.report.live import LiveProgress
from harness.source.gitrepo import HISTORY_TIMEOUT_S, git_result, head_commit, resolve
from harness.triage.model import TriageOptions, TriageResult
from harness.triage.results import ReproduceResult
from harness.vocab import AUTO, HazardKind, StepStatus, TriageStep

PRIOR_COMMIT_S = 30.0  # one commit's test (build + run) before any was timed here
# the Reproduce step's verdict kind → what makes a commit bad (bisect's --expect)
EXPECT_OF = {
    "hang": "hang",
    "crash": "crash",
    "error-exit": "crash",
    "check-failed": "check-failed",
}


def reproduce(result: TriageResult) -> ReproduceResult:
    """What the Reproduce step found, or nothing (an empty result) when it is not done."""
    rep = next((s for s in result.steps if s.name is TriageStep.REPRODUCE), None)
    done = rep is not None and rep.status is StepStatus.DONE
    return rep.found(ReproduceResult) if rep is not None and done else ReproduceResult()


def expectation(found: ReproduceResult) -> tuple[str, str | None, Repeat]:
    """bisect's --expect, --location and --repeat from the Reproduce step: its kind at its
    location; one run per commit when every run reproduced, else `auto` (a sometimes-hang
    passes a bad commit by luck)."""
    expect = EXPECT_OF.get(str(found.kind), "any-failure")
    fails = found.failures
    runs = found.ran if found.ran is not None else found.runs
    flaky = fails is not None and runs is not None and 0 < fails < runs
    return expect, found.location or None, AUTO if flaky else 1


def hazard_sought(found: ReproduceResult) -> HazardExpect | None:
    """Where nothing failed but the runs recorded hazards: the one most runs saw, at the
    function that makes it one (a fork's child entering the runtime), as --expect hazard:…"""
    if found.failures or not found.hazards:
        return None
    first = found.hazards[0]
    try:
        return HazardExpect(HazardKind(first.kind), first.trigger or None)
    except ValueError:
        return None


def prior_s(result: TriageResult) -> float:
    """One commit's test before any was timed here: a build and a run as Reproduce timed
    them (every commit builds anew), else its time per run."""
    found, rep = reproduce(result), result.step(TriageStep.REPRODUCE)
    if found.run_s is not None and found.run_s > 0:
        return found.run_s + (found.build_s or 0.0)
    if rep.duration_s and rep.runs_made:
        return max(1.0, rep.duration_s / rep.runs_made)
    return PRIOR_COMMIT_S


def run_options(opts: TriageOptions, found: ReproduceResult, progress: LiveProgress) -> RunOptions:
    """The triage's run, under the host profile Reproduce had to use (if any), as every
    other step runs it."""
    run = opts.run.but(progress=progress)
    if found.host:
        profile = HostConditions.from_profile(load_host(found.host))
        run = run.but(conditions=profile.merged(opts.run.conditions))
    return run


def bad_end(opts: TriageOptions, pin: Pin, root: Path) -> str:
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


def first_parent_depth(root: Path, sha: str) -> int:
    """Commits on `sha`'s first-parent line below it (the root's distance back)."""
    out = git_result(root, "rev-list", "--first-parent", "--count", sha, timeout=HISTORY_TIMEOUT_S)
    return int(out.stdout.strip()) - 1
