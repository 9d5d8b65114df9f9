"""The options of a run, defined once: compare, bisect, bisect-step (and sweep) embed a
RunOptions rather than copy its fields."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.execute.conditions import HostConditions
from harness.execute.runner import SampleOptions
from harness.hazards.expect import HazardExpect
from harness.report.live import LiveProgress
from harness.watch.watchdog import DEFAULT_QUIESCENT_S


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
    # live progress on stderr (a terminal line, or plain lines in CI); off: silent
    progress: LiveProgress = field(default_factory=LiveProgress.off, compare=False, repr=False)
    # the CPUs, quota, memory, noisy neighbour and env presets of the run (docs/hosts.md)
    conditions: HostConditions = field(default_factory=HostConditions)
    # --hazards: record fork and lock-order hazards (docs/hazards.md); --expect hazard:…
    # (which implies it) makes a passing run that shows that hazard fail as `hazard`
    hazards: bool = False
    expect_hazard: HazardExpect | None = None

    def but(self, **changes: Any) -> RunOptions:
        """A copy with some fields changed (one variant of a compare, one commit of a bisect)."""
        return replace(self, **changes)


def option_flags(opts: RunOptions, *, watch: bool = False) -> list[str]:
    """The `harness run`/`compare` flags that repeat the setup of `opts` (pin, scenario,
    checkout, steps, the trainer's --env and --arg, the host conditions); with `watch`, also
    how it is watched (limits, drift, sampling). A sweep's cells and the compare a cause
    suggests use them."""
    flags: list[str] = []
    values: list[tuple[str, object]] = [
        ("--pin", opts.pin),
        ("--scenario", opts.scenario),
        ("--checkout", opts.checkout),
        ("--steps", opts.steps),
    ]
    if watch:
        values += [
            ("--timeout", opts.timeout_s),
            ("--startup", opts.startup_s),
            ("--stall", opts.stall_s),
            ("--quiescent", opts.quiescent_s),
        ]
    for flag, value in values:
        if value is not None:
            flags += [flag, str(value)]
    for key, value in opts.trainer_env.items():
        flags += ["--env", f"{key}={value}"]
    flags += [f"--arg={a}" for a in opts.trainer_args]
    if watch:
        flags += ["--allow-drift"] if opts.allow_drift else []
        flags += [] if opts.sampling.enabled else ["--no-sample"]
        flags += ["--native", opts.sampling.native, "--python-stacks", opts.sampling.python]
    # so are the hazards sought: a sweep's cells and a compare's variants record them, and
    # fail on the expected one, as the run did
    flags += hazard_flags(opts.hazards, opts.expect_hazard)
    # the host conditions are part of the setup: a hang that needs one CPU needs it in the
    # compare the report suggests as much as in a sweep's cells
    return flags + opts.conditions.flags()


def hazard_flags(hazards: bool, expect: HazardExpect | None) -> list[str]:
    if expect is not None:
        return ["--expect", expect.spec()]
    return ["--hazards"] if hazards else []


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
    progress: LiveProgress = field(default_factory=LiveProgress.off, compare=False, repr=False)
    conditions: HostConditions = field(default_factory=HostConditions)
    hazards: bool = False
    expect_hazard: HazardExpect | None = None


@dataclass(frozen=True)
class CheckOptions:
    target: Path  # a report folder, its report.json, or a raw output log
    scenario: str | None = None
    pin: str | None = None
    parser: str | None = None
    steps: int | None = None
