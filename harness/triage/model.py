"""What a triage is made of (docs/triage.md): its options, its steps and what each found.

Shared by the engine (triage/run.py: which steps run, in what order, in the budget), the
steps (triage/steps.py, triage/history.py) and the story (triage/story.py: triage.html and
issue.md). triage.json is `TriageResult.to_json()`, versioned by SCHEMA_VERSION; `--resume`
reads it back with `from_json` and skips the steps already done."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.doctor.fingerprint import HostFingerprint
from harness.pipeline.options import RunOptions
from harness.report.parsing import parse
from harness.triage.results import (
    RESULTS,
    ExplainResult,
    FixesResult,
    HistoryResult,
    KnobsResult,
    ReproduceResult,
    StepResult,
    read_result,
    result_json,
)
from harness.vocab import StepStatus, TriageStep

SCHEMA_VERSION = 1
R = TypeVar("R", ReproduceResult, ExplainResult, KnobsResult, FixesResult, HistoryResult)


@dataclass
class Step:
    """One step: what it found (`result`: the step's own dataclass of triage/results.py,
    documented in docs/triage.md; None before it found anything), why it was skipped or
    failed, the run folders behind it (relative to the triage folder), what it was
    expected to cost and what it took."""

    name: TriageStep
    status: StepStatus = StepStatus.PENDING
    reason: str = ""
    headline: str = ""  # one sentence for people: "hang 4/4 in env_start (openmp-after-fork)"
    result: StepResult | None = None
    runs: list[str] = field(default_factory=list)  # folders of its runs / tables
    estimate_s: float | None = None
    duration_s: float | None = None
    runs_made: int = 0  # child runs this step started (a resumed step: 0)
    builds_made: int = 0  # builds that were not cache hits

    def found(self, kind: type[R]) -> R:
        """Its result as a `kind`, or an empty one (nothing recorded yet)."""
        return self.result if isinstance(self.result, kind) else kind()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": str(self.name),
            "status": str(self.status),
            "reason": self.reason,
            "headline": self.headline,
            "result": result_json(self.result),
            "runs": list(self.runs),
            "estimate_s": self.estimate_s,
            "duration_s": self.duration_s,
            "runs_made": self.runs_made,
            "builds_made": self.builds_made,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Step:
        """A step read back; a value of the wrong type is a ValueError (a damaged file)."""
        runs = data.get("runs") or []
        if not isinstance(runs, list):
            raise ValueError(f"step {data.get('name')!r}: runs of the wrong type")
        name = TriageStep(data["name"])
        return cls(
            name=name,
            status=StepStatus(data["status"]),
            reason=str(data.get("reason", "")),
            headline=str(data.get("headline", "")),
            result=read_result(name, data.get("result")),
            runs=[str(r) for r in runs],
            estimate_s=seconds(data.get("estimate_s")),
            duration_s=seconds(data.get("duration_s")),
            runs_made=count(data.get("runs_made")),
            builds_made=count(data.get("builds_made")),
        )


def seconds(value: Any) -> float | None:
    """A duration read back: a finite number or null; else a ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a number of seconds")
    return float(value)


def count(value: Any) -> int:
    """A count read back: a whole number ≥ 0 (or null: 0); else a ValueError."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


@dataclass(frozen=True)
class TriageOptions:
    """`harness triage ENV`: the run options every step starts from, and the triage's own."""

    run: RunOptions
    budget_s: float = 900.0  # the whole triage; a step that does not fit is skipped
    good: str | None = None  # a known-good commit (History bisects from it)
    bad: str | None = None  # the commit to reproduce at (default: the pin's / the checkout's)
    repeat_cap: int = 20  # the most runs per cell where a step repeats (`--repeat auto`)
    jobs: int = 1
    resume: Path | None = None  # a triage folder to continue
    # steps not to take (`--skip knobs,history`): SKIPPED "skipped on request"; Reproduce,
    # which every other step builds on, cannot be skipped
    skip: frozenset[TriageStep] = frozenset()


@dataclass
class TriageResult:
    env: str
    directory: Path
    steps: list[Step]
    pin: str = ""
    started_at: str = ""
    finished_at: str | None = None
    budget_s: float = 0.0
    spent_s: float = 0.0
    # what the steps say together: reproduced (a failure was reproduced here), the fix
    # confirmed, the first bad commit; one line each for people
    reproduced: bool = False
    fix_confirmed: str | None = None  # the variant confirmed
    first_bad: str | None = None  # sha
    conclusion: list[str] = field(default_factory=list)
    host: HostFingerprint | None = None  # the host as it was found, as report.json has it
    commands: list[str] = field(default_factory=list)  # what reproduces it, exactly

    def step(self, name: TriageStep) -> Step:
        return next(s for s in self.steps if s.name is name)

    def found(self, kind: type[R]) -> R:
        """What the step that records a `kind` found: its result, or an empty one (a step
        not run yet, one that recorded nothing, or a file without that step)."""
        name = next(n for n, c in RESULTS.items() if c is kind)
        step = next((s for s in self.steps if s.name is name), None)
        return step.found(kind) if step is not None else kind()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "mode": "triage",
            "env": self.env,
            "pin": self.pin,
            "directory": str(self.directory),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "budget_s": self.budget_s,
            "spent_s": self.spent_s,
            "reproduced": self.reproduced,
            "fix_confirmed": self.fix_confirmed,
            "first_bad": self.first_bad,
            "conclusion": list(self.conclusion),
            "host": self.host.to_json() if self.host is not None else {},
            "commands": list(self.commands),
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], directory: Path) -> TriageResult:
        return cls(
            env=str(data["env"]),
            directory=directory,
            steps=[Step.from_json(s) for s in data.get("steps") or []],
            pin=str(data.get("pin", "")),
            started_at=str(data.get("started_at", "")),
            finished_at=data.get("finished_at"),
            budget_s=float(data.get("budget_s") or 0.0),
            spent_s=float(data.get("spent_s") or 0.0),
            reproduced=bool(data.get("reproduced")),
            fix_confirmed=data.get("fix_confirmed"),
            first_bad=data.get("first_bad"),
            conclusion=[str(c) for c in data.get("conclusion") or []],
            host=parse(HostFingerprint, data["host"], "host") if data.get("host") else None,
            commands=[str(c) for c in data.get("commands") or []],
        )
