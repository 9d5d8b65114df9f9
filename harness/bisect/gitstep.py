"""`harness bisect-step` under `git bisect run` with the posterior (docs/bisect.md, "With
`git bisect run`"): git asks for one final answer per commit, so each step runs until the
posterior over the first bad commit says on which side of the change HEAD lies, with the
confidence a whole bisect needs, or gives up (skip).

The frame is the bisect's own: its first bad and good marks (from `git bisect log`) are the
ends, the first-parent line between them the candidates. Every run of
every step is kept in a state file under the report folder (one per frame, rewritten
atomically), so later steps start from all that earlier ones saw: the rates on both sides
are learned once. A step runs HEAD, or an end when the model expects to learn more per
second there (the bad end first, once, for the failure's signature), one run at a time,
until P(HEAD is at or after the change) reaches the step's confidence (bad, exit 1) or
falls below its complement (good, exit 0). The step's confidence is the bisect's
--confidence shared over the ⌈log2 N⌉ answers git will ask for, so that the whole bisect is
right that often. A step that cannot decide within STEP_RUNS runs, or whose HEAD cannot be
built, is a skip (125).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.bisect import posterior as post
from harness.bisect.adaptive import Sought, outcome_of
from harness.bisect.model import UNREPEATABLE, Setup
from harness.bisect.steps import run_once
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.source.gitrepo import CommitInfo, commit_info, first_parent_range, git_result
from harness.vocab import BisectClass

STEP_RUNS = 30  # the most runs one step makes before it answers skip (--max-runs)
# each mark in `git bisect log` is a comment line "# bad: [SHA] subject" (the start's ends
# come first, before "git bisect start 'B' 'G'")
_LOG_LINE = re.compile(r"^# (bad|good): \[([0-9a-f]{40,64})\]")  # SHA-1 or SHA-256


@dataclass
class Frame:
    """The bisect's ends and its candidates, oldest first (the bad end last)."""

    good: CommitInfo
    candidates: list[CommitInfo]

    def commit_at(self, position: int) -> CommitInfo:
        return self.good if position == 0 else self.candidates[position - 1]

    def position(self, sha: str) -> int | None:
        if sha == self.good.sha:
            return 0
        return next((i + 1 for i, c in enumerate(self.candidates) if c.sha == sha), None)


def frame_of(root: Path) -> Frame | None:
    """The bisect under way in `root` (its first bad and good marks), None when none is."""
    res = git_result(root, "bisect", "log", ok=(0, 1))  # 1: "We are not bisecting."
    if res.returncode != 0:
        return None
    first: dict[str, str] = {}
    for line in res.stdout.splitlines():
        m = _LOG_LINE.match(line.strip())
        if m and m.group(1) not in first:
            first[m.group(1)] = m.group(2)
    if set(first) != {"bad", "good"}:
        return None
    candidates = first_parent_range(root, first["good"], first["bad"])
    if not candidates:
        return None
    return Frame(commit_info(root, first["good"]), candidates)


@dataclass
class StepState:
    """Every run of the bisect's steps, by commit: the outcomes, and the signature sought."""

    path: Path
    runs: dict[str, list[int]] = field(default_factory=dict)
    location: str | None = None
    seconds: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> StepState:
        """The state kept so far; a missing, unreadable or malformed file is no state (a
        step never fails on it: it starts afresh and rewrites it)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            runs, seconds, location = data["runs"], data["seconds"], data.get("location")
            ok = (
                isinstance(runs, dict)
                and isinstance(seconds, dict)
                and (location is None or isinstance(location, str))
                and all(
                    isinstance(v, list)
                    and all(o in post.OUTCOMES and isinstance(o, int) for o in v)
                    and isinstance(seconds.get(k), list)
                    and len(seconds[k]) == len(v)
                    and all(isinstance(x, int | float) and x >= 0 for x in seconds[k])
                    for k, v in runs.items()
                )
            )
            return cls(path, runs, location, seconds) if ok else cls(path)
        except (OSError, ValueError, KeyError, TypeError):
            return cls(path)  # none yet, or unreadable: start afresh

    def save(self) -> None:
        data = {"runs": self.runs, "location": self.location, "seconds": self.seconds}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(data, indent=1) + "\n")


def step_confidence(confidence: float, candidates: int) -> float:
    """Each answer's confidence: the bisect's error shared over its ⌈log2 N⌉ answers."""
    answers = max(1, math.ceil(math.log2(max(2, candidates))))
    return 1 - (1 - confidence) / answers


def decide(
    setup: Setup, frame: Frame, head: CommitInfo, report_dir: Path
) -> tuple[BisectClass, str]:
    """Run until HEAD's side is known (see the module doc): its class and a line saying
    why."""
    opts = setup.opts
    n = len(frame.candidates)
    j = frame.position(head.sha)
    assert j is not None
    # the ends and what is sought: another --expect, --location, variant or scenario over the
    # same ends starts a state of its own
    what = [opts.expect, opts.location, opts.run.variant, str(opts.run.scenario), opts.run.env]
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:8]
    key = f"{frame.candidates[-1].sha[:12]}-{frame.good.sha[:12]}-{digest}"
    state = StepState.load(report_dir / "bisect-step" / f"{key}.json")
    model, costs = post.Model(n + 1), post.Costs()
    for sha, outcomes in state.runs.items():
        kept = frame.position(sha)
        for o, s in zip(outcomes, state.seconds[sha], strict=True):
            if kept is not None:
                model.add(kept, o)
            costs.add(o, s, None)
    sought = Sought.of(opts, state.location)
    level = step_confidence(opts.confidence, n)
    tries = {0, j, n}
    made = 0
    while True:
        p = model.posterior()
        after = sum(p[: j + 1])  # k <= j: HEAD is at or after the change
        words = f"P(bad) {after:.3f} after {made} run(s) here, {model.runs} in all"
        if after >= level:
            return BisectClass.BAD, words
        if after <= 1 - level:
            return BisectClass.GOOD, words
        if post.not_reproduced(model):
            raise HarnessError(
                f"the failure sought does not reproduce at the bad end {frame.commit_at(n).short}"
                f" ({model.counts[n][post.SOUGHT]} of {sum(model.counts[n])} runs): nothing to "
                "bisect"
            )
        if made >= (opts.max_runs or STEP_RUNS):
            return BisectClass.SKIP, f"undecided: {words}"
        # the bad end until its first failure names the signature sought
        at = n if n in tries and not sought.known else None
        if at is None:
            others = set(range(n + 1)) - tries
            at = post.choose(model, p, costs, untestable=others)
        if at is None:
            return BisectClass.SKIP, f"nothing left to learn: {words}"
        commit = frame.commit_at(at)
        row = run_once(setup, commit, opts.run.variant, report_dir)
        made += 1
        if row.kind in UNREPEATABLE:
            if at == j:
                return BisectClass.SKIP, f"HEAD cannot be tested: {row.summary}"
            if at == n:
                raise HarnessError(f"the bad end {commit.short} cannot be tested: {row.summary}")
            tries.discard(at)
            continue
        got = outcome_of(row, sought.judge(row, bad_end=at == n))
        assert got is not None  # an untestable run returned above
        if opts.location is None:
            state.location = sought.location  # the bad end's first failure, once learned
        model.add(at, got)
        costs.add(got, row.run_s or 1.0, None)
        state.runs.setdefault(commit.sha, []).append(got)
        state.seconds.setdefault(commit.sha, []).append(row.run_s or 1.0)
        state.save()
