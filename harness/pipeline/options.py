"""The options of a run, defined once: compare, bisect, bisect-step (and sweep) embed a
RunOptions rather than copy its fields."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.execute.runner import SampleOptions
from harness.execute.watchdog import DEFAULT_QUIESCENT_S
from harness.report.live import LiveProgress


@dataclass(frozen=True)
class RunOptions:
    env: str
    pin: str | None = None
    scenario: str | None = None
    variant: str = "stock"
    timeout_s: float | None = None
    startup_s: float | None = None
    stall_s: float | None = None
    quiescent_s: float | None = None  # None: DEFAULT_QUIESCENT_S; 0: off
    steps: int | None = None
    trainer_env: dict[str, str] = field(default_factory=dict)
    trainer_args: list[str] = field(default_factory=list)
    report_dir: Path = Path("reports")
    checkout: Path | None = None
    allow_drift: bool = False
    # git pins: build this commit's tree (bisect) instead of the checkout's
    commit: str | None = None
    sampling: SampleOptions = field(default_factory=SampleOptions)
    tee: bool = False
    harness_argv: list[str] = field(default_factory=list)
    # live progress on stderr (a terminal line, or plain lines in CI); None: silent
    progress: LiveProgress | None = field(default=None, compare=False, repr=False)

    def but(self, **changes: Any) -> RunOptions:
        """A copy with some fields changed (one variant of a compare, one commit of a bisect)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class WatchOptions:
    argv: list[str]
    timeout_s: float
    startup_s: float
    stall_s: float
    quiescent_s: float = DEFAULT_QUIESCENT_S  # 0: off
    parser: str = "lines"
    cwd: Path = Path(".")
    trainer_env: dict[str, str] = field(default_factory=dict)
    report_dir: Path = Path("reports")
    sampling: SampleOptions = field(default_factory=SampleOptions)
    tee: bool = False
    harness_argv: list[str] = field(default_factory=list)
    progress: LiveProgress | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CheckOptions:
    target: Path  # a report folder, its report.json, or a raw output log
    scenario: str | None = None
    pin: str | None = None
    parser: str | None = None
    steps: int | None = None
