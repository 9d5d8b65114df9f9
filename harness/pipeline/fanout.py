"""`harness matrix ENV`: the runs of a sweep or a repeat planned as a CI job matrix, for
an engine that already runs jobs side by side (docs/matrix.md).

Each run (cell × repeat) is one entry of GitHub Actions' `strategy.matrix` `include` list,
carrying the one command its job runs: a `harness run`, built by the same translation a
local sweep gives its children (`pipeline.repeat.run_argv`), reporting into its own folder,
`<report-dir>/<id>`. The jobs upload those folders; `harness collect` tells them together
(pipeline/collect.py). Nothing runs here: the plan is checked (env, pin, variants, host
profiles) so that a typo fails the plan job, not 256 run jobs."""

from __future__ import annotations

import math
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import variants
from harness.config.defaults import default_pin
from harness.config.hostprofile import load_host
from harness.config.pin import check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.children import MARGIN_S
from harness.pipeline.options import RunOptions
from harness.pipeline.repeat import Repeat, run_argv
from harness.pipeline.stages import limits_for
from harness.pipeline.sweep import Knob, cells_for
from harness.vocab import AxisKind

# GitHub Actions runs at most 256 jobs per matrix (per workflow run): a larger plan is
# refused here rather than cut there
MAX_JOBS = 256
PROGRAM = "harness"  # the command a job runs: the harness on the job's PATH


SETUP_BUILD_MINUTES = 30  # a fresh CI runner: checkout, setup.sh, the variant's cold build


@dataclass(frozen=True)
class Job:
    """One entry of the matrix: one run of one cell."""

    id: str  # c000-r01: the cell and the run, also the name of its report folder
    cell: dict[str, str]  # the cell's coordinates (knob label → value), as a sweep labels them
    run: int  # 1-based, within the cell
    command: str  # the one shell command the job runs (shlex-quoted)
    report_dir: str  # where that command's report folder goes: upload this
    timeout_minutes: int  # the run's wall limit and the child margin

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cell": dict(self.cell),
            "run": self.run,
            "command": self.command,
            "report_dir": self.report_dir,
            "timeout_minutes": self.timeout_minutes,
            # the job's own limit: the run's, and time for setup and a cold build (a fresh
            # runner has no build cache; the run's command builds first)
            "job_timeout_minutes": self.timeout_minutes + SETUP_BUILD_MINUTES,
        }


@dataclass(frozen=True)
class FanOut:
    env: str
    knobs: list[Knob]
    cells: int
    runs: int  # per cell
    jobs: list[Job]

    def to_json(self) -> dict[str, Any]:
        """`strategy.matrix` as GitHub Actions reads it (`fromJSON` of a job output)."""
        return {"include": [j.to_json() for j in self.jobs]}

    def describe(self) -> str:
        axes = ", ".join(k.label for k in self.knobs) or "none"
        return (
            f"{len(self.jobs)} jobs: {self.cells} cell(s) × {self.runs} run(s) of {self.env} "
            f"(axes: {axes})"
        )


def check_plan(base: RunOptions, knobs: Sequence[Knob]) -> float:
    """The env, pin, variants and host profiles of the plan exist (one usage line when
    not); the wall limit of one run, in seconds."""
    scenario = load_scenario(base.scenario or base.env)
    pin = load_pin(base.pin or default_pin(base.checkout))
    settings = scenario.settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    for knob in knobs:
        for value in knob.values:
            if knob.kind is AxisKind.VARIANT:
                variants.parse_variant(value, pin)
            elif knob.kind is AxisKind.HOST:
                load_host(value)
    if not any(k.kind is AxisKind.VARIANT for k in knobs):
        variants.parse_variant(base.variant, pin)
    return limits_for(base, settings).wall_s


def job_command(argv: list[str]) -> str:
    """A child harness's argv (`python -m harness run …`) as the job's command line."""
    head = [sys.executable, "-m", "harness"]
    assert argv[: len(head)] == head, argv  # run_argv's own head: the one translation
    return shlex.join([PROGRAM, *argv[len(head) :]])


def plan_matrix(
    base: RunOptions,
    knobs: Sequence[Knob],
    plan: Repeat,
    root: Path,
    limit: int = MAX_JOBS,
) -> FanOut:
    """A job per run of every cell: the cell's `harness run`, reporting into `root/<id>`.
    More than `limit` jobs is one usage line that says how many it would be."""
    if plan.auto or plan.until_fail:
        raise HarnessError(
            "a matrix starts all its runs at once: --until-fail and --repeat auto cannot "
            "stop the others; give --repeat N",
            USAGE,
        )
    if plan.jobs != 1:
        raise HarnessError(
            "--jobs: in a matrix every run is its own job (the workflow's max-parallel "
            "limits how many run at once)",
            USAGE,
        )
    cells = cells_for(knobs, base)
    total = len(cells) * plan.runs
    if total > limit:
        raise HarnessError(
            f"the matrix would have {total} entries ({len(cells)} cells × {plan.runs} runs); "
            f"GitHub Actions runs at most {limit} jobs per matrix: fewer values or runs, or "
            "split the knobs over several workflow runs and collect them together",
            USAGE,
        )
    wall_s = check_plan(base, knobs)
    minutes = math.ceil((wall_s + MARGIN_S) / 60)
    cell_w, run_w = max(3, len(str(len(cells) - 1))), max(2, len(str(plan.runs)))
    jobs = []
    for cell in cells:
        argv_for = run_argv(base, cell.variant, cell.trainer_env, cell.trainer_args, cell.host)
        for n in range(1, plan.runs + 1):
            ident = f"c{cell.index:0{cell_w}d}-r{n:0{run_w}d}"
            folder = root / ident
            command = job_command(argv_for(folder))
            jobs.append(Job(ident, dict(cell.values), n, command, str(folder), minutes))
    return FanOut(base.env, list(knobs), len(cells), plan.runs, jobs)
