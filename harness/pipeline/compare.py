"""`harness compare`: one scenario, several variants, and whether the fix is confirmed, on
the variants' failure rates (pipeline/decide.py): each variant built once, then run by child
harnesses (`--repeat N`, or `auto`: rounds until the decision is settled or the cap)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import outcome, variants
from harness.config.defaults import compare_baseline, default_pin
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError, Interrupted
from harness.outcome import USAGE, CompareExit
from harness.pipeline.children import ChildRuns
from harness.pipeline.decide import Judged, judge_compare, next_round
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
from harness.vocab import Decision, TableKind

AXIS = "variant"


@dataclass
class CompareResult:
    env: str
    rows: list[RunRow]
    judged: Judged
    plan: Repeat

    @property
    def confirmed(self) -> bool:
        return self.judged.confirmed

    @property
    def why(self) -> str:
        return self.judged.why

    @property
    def exit_code(self) -> int:
        """0 confirmed, 1 not; an interrupted variant's code (128 + N) when one was."""
        for row in self.rows:
            code = row.exit_code
            if code is not None and code >= outcome.INTERRUPTED_BASE:  # the compare stopped
                return code
        return CompareExit.CONFIRMED if self.confirmed else CompareExit.NOT_CONFIRMED

    def matrix(self) -> Matrix:
        return Matrix(
            mode=TableKind.COMPARE,
            title=f"harness compare {self.env}",
            axes=[AXIS],
            rows=self.rows,
            conclusion=[self.why],
            env=self.env,
            rows_key="variants",
            extra={
                "confirmed": self.confirmed,
                "decision": str(self.judged.decision),
                "runs_needed": self.judged.runs_needed,
                "repeat": self.plan.describe(),
                "summary": self.why,
            },
        )


def default_variants(pin: Pin) -> list[str]:
    """The baseline (data/defaults.toml), then the pin's fixes."""
    baseline = compare_baseline()
    return [baseline, *(f for f in pin.fixes if f != baseline)]


def compare_variants(
    opts: RunOptions, variant_specs: Sequence[str] | None, out: Path, plan: Repeat
) -> CompareResult:
    """Run the scenario for each variant (None: the baseline then the pin's fixes), each
    run a child harness reporting under `out/variants/NN`, and judge the fix."""
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    specs = list(variant_specs) if variant_specs is not None else default_variants(pin)
    if len(specs) < 2:
        if variant_specs is not None:
            why = "--variants needs at least two variants: a baseline and a fix"
        else:
            why = f"pin {pin.name} names no fixes: give --variants BASELINE,FIX"
        raise HarnessError(why, USAGE)
    if len(set(specs)) != len(specs):
        raise HarnessError(f"a variant is given twice: {', '.join(specs)}", USAGE)
    for spec in specs:  # a typo in the last variant fails now, not after the others
        variants.parse_variant(spec, pin)
    settings = load_scenario(opts.scenario or opts.env).settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    try:
        builds = build_each(opts, pin, specs, settings.upstream_env)
        limit_s = run_limit(opts, settings)
        rows = _rounds(opts, specs, builds, out, limit_s, plan)
    finally:
        opts.progress.close()
    return CompareResult(opts.env, rows, judge_compare(rows), plan)


def _rounds(
    opts: RunOptions,
    specs: Sequence[str],
    builds: dict[str, str],
    out: Path,
    limit_s: float,
    plan: Repeat,
) -> list[RunRow]:
    """The runs of every variant that built: a first round, then (auto) more rounds while
    the decision is unsettled and the cap allows."""
    targets = [
        Target(out / "variants" / f"{i:02d}", run_argv(opts, spec), {AXIS: spec}, spec)
        for i, spec in enumerate(specs)
    ]
    runnable = [i for i, s in enumerate(specs) if not builds.get(s, "").startswith(FAILED)]
    done = progress_done(opts.progress)
    rows: dict[int, list[RunRow]] = {}
    with ChildRuns() as runner:
        try:
            first = {i: plan.first_round for i in runnable}
            run_rounds(targets, first, rows, plan, runner, limit_s, done)
            while plan.auto:
                table = _table(specs, targets, rows, builds)
                judged = judge_compare(table)
                have = min((len(rows.get(i, [])) for i in runnable), default=plan.runs)
                want = next_round(judged, have, plan.runs)
                if want is None or _stopped(table):
                    break
                # a baseline that has not failed yet: only it runs more (the fixes wait for it)
                who = runnable[:1] if judged.decision is Decision.NOT_REPRODUCED else runnable
                more = {i: want - len(rows.get(i, [])) for i in who}
                run_rounds(targets, more, rows, plan, runner, limit_s, done)
        except Interrupted as exc:
            raise RunsInterrupted(exc.signum, _table(specs, targets, rows, builds), out) from None
    return _table(specs, targets, rows, builds)


def _stopped(rows: Sequence[RunRow]) -> bool:
    return any(r.exit_code is not None and r.exit_code >= outcome.INTERRUPTED_BASE for r in rows)


def _table(
    specs: Sequence[str],
    targets: Sequence[Target],
    rows: dict[int, list[RunRow]],
    builds: dict[str, str],
) -> list[RunRow]:
    """A row per variant, in the order given: its runs combined, or why it did not run."""
    by_index = combined(targets, rows)
    table = []
    for i, spec in enumerate(specs):
        if i in by_index:
            table.append(by_index[i])
        else:
            why = f"the build of {spec} {builds.get(spec, 'did not run')}"
            table.append(row_from_error(why, None, {AXIS: spec}, spec))
    return table
