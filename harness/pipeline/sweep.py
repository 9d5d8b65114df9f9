"""`harness sweep ENV`: the knob matrix the report's author tried by hand, run and judged.

Cells are the cartesian product of `--set section.key=v1,v2` (trainer config, passed the
upstream's way: `--section.key=value`), `--env KEY=v1,v2` (the trainer's environment:
OMP_WAIT_POLICY, OMP_NUM_THREADS …) and `--variants a,b` (source and build variants, e.g.
`env:CC=clang` where the pin's build honours CC). Each cell is a normal `harness run` in its
own process (its own session, its own report, a hard timeout), so one cell can never leave
anything to the next; each distinct variant is built once before the cells (the cells are
then cache hits). The conclusion says which knobs change the outcome and which are ruled out.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import variants
from harness.config.defaults import default_pin
from harness.config.pin import check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError, Interrupted
from harness.outcome import USAGE, Kind, SweepExit
from harness.pipeline.children import ChildRuns
from harness.pipeline.decide import failures_text, judge_knob
from harness.pipeline.options import RunOptions
from harness.pipeline.repeat import (
    FAILED,
    Repeat,
    RunsInterrupted,
    Target,
    build_each,
    combined,
    progress_done,
    run_argv,
    run_limit,
    run_rounds,
)
from harness.report.matrix import Matrix
from harness.report.runs import RunRow, row_from_error
from harness.vocab import AxisKind, TableKind


@dataclass(frozen=True)
class Knob:
    """One dimension of the sweep: `--set train.lr`, `--env OMP_WAIT_POLICY` or `variant`."""

    kind: AxisKind
    name: str
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        return {
            AxisKind.SET: f"--{self.name}",
            AxisKind.ENV: self.name,
            AxisKind.VARIANT: "variant",
            AxisKind.HOST: "host",
        }[self.kind]


@dataclass
class Cell:
    """One planned run of the matrix: its coordinates (knob label → value) and what it runs;
    its outcome is a RunRow."""

    index: int
    values: dict[str, str]
    variant: str
    trainer_env: dict[str, str]
    trainer_args: list[str]
    host: str | None = None  # a hosts/*.toml profile (`--host`), when the sweep has that axis


@dataclass
class SweepResult:
    env: str
    knobs: list[Knob]
    rows: list[RunRow]  # one per cell, in the cells' order
    directory: Path
    builds: dict[str, str] = field(default_factory=dict)  # variant → "built …" or "failed: …"
    conclusion: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every cell ran (whatever it found), 1 when some could not."""
        # a repeated cell counts its runs: one that could not run fails the sweep too
        failed = any(Kind.ERROR in r.kinds for r in self.rows)
        return SweepExit.CELL_FAILED if failed else SweepExit.RAN

    def matrix(self) -> Matrix:
        return Matrix(
            mode=TableKind.SWEEP,
            title=f"harness sweep {self.env}",
            axes=[k.label for k in self.knobs],
            rows=self.rows,
            conclusion=self.conclusion,
            env=self.env,
            rows_key="cells",
            extra={
                "knobs": [
                    {"kind": k.kind, "name": k.name, "values": list(k.values)} for k in self.knobs
                ],
                "builds": self.builds,
                "distinct_build_keys": len({r.build_key for r in self.rows if r.build_key}),
            },
        )


def parse_knobs(
    sets: Sequence[str],
    envs: Sequence[str],
    variant_list: str | None,
    host_list: str | None = None,
) -> list[Knob]:
    knobs: list[Knob] = []
    for kind, items in ((AxisKind.SET, sets), (AxisKind.ENV, envs)):
        for item in items:
            name, sep, values = item.partition("=")
            vals = tuple(v for v in values.split(",") if v != "")
            if not sep or not name or not vals:
                flag = "--set section.key=v1,v2" if kind is AxisKind.SET else "--env KEY=v1,v2"
                raise HarnessError(f"expected {flag}, got {item!r}", USAGE)
            if kind is AxisKind.SET and "." not in name:
                raise HarnessError(f"--set needs section.key (e.g. vec.num_threads), got {name!r}")
            knobs.append(Knob(kind, name.lstrip("-"), vals))
    if variant_list is not None:
        vals = tuple(v.strip() for v in variant_list.split(",") if v.strip())
        if not vals:
            raise HarnessError(f"--variants names no variant: {variant_list!r}", USAGE)
        knobs.append(Knob(AxisKind.VARIANT, "variant", vals))
    if host_list is not None:
        vals = tuple(v.strip() for v in host_list.split(",") if v.strip())
        if not vals:
            raise HarnessError(f"--host names no host profile: {host_list!r}", USAGE)
        knobs.append(Knob(AxisKind.HOST, "host", vals))
    if not knobs:
        raise HarnessError("a sweep needs at least one --set, --env, --variants or --host", USAGE)
    names = [k.label for k in knobs]
    if len(set(names)) != len(names):
        raise HarnessError(f"a knob is given twice: {', '.join(names)}", USAGE)
    return knobs


def cells_for(knobs: Sequence[Knob], base: RunOptions) -> list[Cell]:
    cells = []
    for i, combo in enumerate(itertools.product(*(k.values for k in knobs))):
        env = dict(base.trainer_env)
        args = list(base.trainer_args)
        variant = base.variant
        host = None
        values = {}
        for knob, value in zip(knobs, combo, strict=True):
            values[knob.label] = value
            if knob.kind is AxisKind.SET:
                args.append(f"--{knob.name}={value}")
            elif knob.kind is AxisKind.ENV:
                env[knob.name] = value
            elif knob.kind is AxisKind.HOST:
                host = value
            else:
                variant = value
        cells.append(Cell(i, values, variant, env, args, host))
    return cells


def conclude(knobs: Sequence[Knob], rows: Sequence[RunRow]) -> list[str]:
    """For each knob: does changing only it (the other knobs held) change the outcome, on
    the cells' rates (pipeline/decide.py)? A knob is ruled out only on enough runs."""
    lines = []
    for knob in knobs:
        others = [k.label for k in knobs if k is not knob]
        groups: dict[tuple[str, ...], list[RunRow]] = {}
        by_value: dict[str, list[RunRow]] = {}
        for r in rows:
            if r.kind is Kind.ERROR and not r.counts:
                continue
            groups.setdefault(tuple(r.values[o] for o in others), []).append(r)
            by_value.setdefault(r.values[knob.label], []).append(r)
        shown = "; ".join(f"{v} → {failures_text(rs)}" for v, rs in by_value.items())
        lines.append(judge_knob(knob.label, list(groups.values()), shown).line)
    errors = sum(r.kind is Kind.ERROR for r in rows)
    if errors:
        lines.append(f"{errors} cell(s) could not run: see their summaries")
    return lines


def run_sweep(
    base: RunOptions, knobs: Sequence[Knob], out: Path, plan: Repeat | None = None
) -> SweepResult:
    """Validate, build each variant once, run every cell (its runs up to `plan.jobs` at a
    time, cells side by side)."""
    plan = plan or Repeat()
    scenario = load_scenario(base.scenario or base.env)
    pin = load_pin(base.pin or default_pin(base.checkout))
    settings = scenario.settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    cells = cells_for(knobs, base)
    specs = sorted({c.variant for c in cells})
    for spec in specs:  # a typo fails now, not after an hour
        variants.parse_variant(spec, pin)
    result = SweepResult(base.env, list(knobs), [], out)
    progress = base.progress
    try:
        result.builds = build_each(base, pin, specs, settings.upstream_env)
        limit_s = run_limit(base, settings)
        result.rows = _run_cells(base, cells, out, limit_s, plan, result.builds)
    finally:
        progress.close()
    result.conclusion = conclude(knobs, result.rows)
    return result


def _run_cells(
    base: RunOptions,
    cells: Sequence[Cell],
    out: Path,
    limit_s: float,
    plan: Repeat,
    builds: dict[str, str],
) -> list[RunRow]:
    """Every cell whose variant built, `plan.runs` times; a row per cell in cell order."""
    runnable = [c for c in cells if not builds.get(c.variant, "").startswith(FAILED)]
    targets = [
        Target(
            out / "cells" / f"{c.index:03d}",
            run_argv(base, c.variant, c.trainer_env, c.trainer_args, c.host),
            c.values,
            c.variant,
        )
        for c in runnable
    ]
    done = progress_done(base.progress, len(targets) * plan.runs)
    rows: dict[int, list[RunRow]] = {}
    more = {i: plan.runs for i in range(len(targets))}
    try:
        with ChildRuns() as runner:
            run_rounds(targets, more, rows, plan, runner, limit_s, done)
    except Interrupted as exc:
        by_target = combined(targets, rows)  # the cells with a finished run, in cell order
        finished = [by_target[n] for n in sorted(by_target)]
        raise RunsInterrupted(exc.signum, finished, out) from None
    return _rows(cells, runnable, targets, rows, builds)


def _rows(
    cells: Sequence[Cell],
    runnable: Sequence[Cell],
    targets: Sequence[Target],
    rows: dict[int, list[RunRow]],
    builds: dict[str, str],
) -> list[RunRow]:
    """A row per cell in cell order: its runs combined, or why its variant did not run."""
    by_target = combined(targets, rows)
    ran = {c.index: by_target[n] for n, c in enumerate(runnable) if n in by_target}
    out_rows = []
    for c in cells:
        if c.index in ran:
            out_rows.append(ran[c.index])
        else:  # its variant did not build: its runs would only rebuild and fail in their limit
            why = f"the build of {c.variant} {builds.get(c.variant, '')}"
            out_rows.append(row_from_error(why, None, c.values, c.variant))
    return out_rows
