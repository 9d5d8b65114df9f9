"""`harness compare`: one scenario, several variants, and whether the fix is confirmed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness import outcome, variants
from harness.config.defaults import compare_baseline, default_pin
from harness.config.pin import Pin, load_pin
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.pipeline.options import RunOptions
from harness.pipeline.run import run_env
from harness.report.matrix import Matrix
from harness.report.runs import RunRow, row_from_error, row_from_report

AXIS = "variant"


@dataclass
class CompareResult:
    env: str
    rows: list[RunRow]
    confirmed: bool
    why: str

    @property
    def exit_code(self) -> int:
        """0 confirmed, 1 not; an interrupted variant's code (128 + N) when one was."""
        last = self.rows[-1].exit_code if self.rows else None
        if last is not None and last >= outcome.INTERRUPTED_BASE:  # the compare stopped there
            return last
        return 0 if self.confirmed else 1

    def matrix(self) -> Matrix:
        return Matrix(
            mode="compare",
            title=f"harness compare {self.env}",
            axes=[AXIS],
            rows=self.rows,
            conclusion=[self.why],
            env=self.env,
            rows_key="variants",
            extra={"confirmed": self.confirmed, "summary": self.why},
        )


def default_variants(pin: Pin) -> list[str]:
    """The baseline (data/defaults.toml), then the pin's fixes."""
    baseline = compare_baseline()
    return [baseline, *(f for f in pin.fixes if f != baseline)]


def compare_variants(opts: RunOptions, variant_specs: Sequence[str] | None) -> CompareResult:
    """Run the scenario once per variant (None: the baseline then the pin's fixes). The fix
    is confirmed when the first variant (the baseline) reproduces a failure and every other
    variant passes."""
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    specs = list(variant_specs) if variant_specs is not None else default_variants(pin)
    if len(specs) < 2:
        if variant_specs is not None:
            why = "--variants needs at least two variants: a baseline and a fix"
        else:
            why = f"pin {pin.name} names no fixes: give --variants BASELINE,FIX"
        raise HarnessError(why, USAGE)
    for spec in specs:  # a typo in the last variant fails now, not after the others
        variants.parse_variant(spec, pin)
    rows: list[RunRow] = []
    for i, spec in enumerate(specs, 1):
        opts.progress.label = f"harness compare {opts.env} [{i}/{len(specs)} {spec}]"
        values = {AXIS: spec}
        try:
            report, code = run_env(opts.but(variant=spec))
        except HarnessError as exc:  # this variant could not run: a row, not an abort
            rows.append(row_from_error(exc.message, exc.exit_code, values, spec))
            continue
        rows.append(row_from_report(report, code, values, spec))
        if code >= outcome.INTERRUPTED_BASE:  # interrupted: stop comparing
            break
    confirmed, why = judge(rows)
    return CompareResult(opts.env, rows, confirmed, why)


def judge(rows: Sequence[RunRow]) -> tuple[bool, str]:
    """Whether the fix is confirmed, and the sentence that says why."""
    base, rest = rows[0], rows[1:]
    # the baseline must reproduce a failure (not merely fail to build or run)
    reproduced = outcome.reproduces(base.kind)
    confirmed = reproduced and bool(rest) and all(r.kind is Kind.PASS for r in rest)
    if confirmed:
        return True, (
            f"fix confirmed: {base.variant} → {base.kind}"
            + (f" in {base.location}" if base.location else "")
            + "; "
            + ", ".join(f"{r.variant} → pass" for r in rest)
        )
    if base.kind is Kind.PASS:
        return False, f"not confirmed: the baseline {base.variant} passes (nothing to fix here)"
    if not reproduced:
        return False, (
            f"not confirmed: the baseline {base.variant} did not reproduce a failure ({base.kind})"
        )
    bad = [f"{r.variant} → {r.kind}" for r in rest if r.kind is not Kind.PASS]
    return False, "not confirmed: " + ", ".join(bad or ["no fix variant given"])
