"""`harness compare`: one scenario, several variants, and whether the fix is confirmed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness import outcome, variants
from harness.config.defaults import default_pin
from harness.config.pin import load_pin
from harness.errors import HarnessError
from harness.pipeline.options import RunOptions
from harness.pipeline.run import run_env


@dataclass
class CompareRow:
    variant: str
    kind: str
    location: str | None
    mechanism: str | None
    epochs: float | None
    sps: float | None
    checks_failed: list[str]
    exit_code: int
    report_dir: str
    reason: str = ""  # the verdict's one-line summary, or why the variant could not run


def compare_variants(
    opts: RunOptions, variant_specs: Sequence[str]
) -> tuple[list[CompareRow], bool, str]:
    """Run the scenario once per variant. The fix is confirmed when the first variant (the
    baseline, normally stock) reproduces a failure and every other variant passes."""
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    for spec in variant_specs:  # a typo in the last variant fails now, not after the others
        variants.parse_variant(spec, pin)
    rows: list[CompareRow] = []
    for i, spec in enumerate(variant_specs, 1):
        if opts.progress is not None:
            opts.progress.label = f"harness compare {opts.env} [{i}/{len(variant_specs)} {spec}]"
        try:
            report, code = run_env(opts.but(variant=spec))
        except HarnessError as exc:  # this variant could not run: a row, not an abort
            rows.append(
                CompareRow(
                    spec, "error", None, None, None, None, [], exc.exit_code, "", exc.message
                )
            )
            continue
        v = report.verdict
        last = report.progress.last_metrics
        rows.append(
            CompareRow(
                variant=spec,
                kind=report.kind,
                location=v.location if v else None,
                mechanism=v.mechanism if v else None,
                epochs=last.get("epoch"),
                sps=last.get("SPS"),
                checks_failed=[c.name for c in report.checks if c.status == "fail"],
                exit_code=code,
                report_dir=str(report.directory),
                reason=v.summary if v else "",
            )
        )
        if code >= outcome.INTERRUPTED_BASE:  # interrupted: stop comparing
            break
    base, rest = rows[0], rows[1:]
    # the baseline must reproduce a failure (not merely fail to build or run)
    reproduced = outcome.reproduces(base.kind)
    confirmed = reproduced and bool(rest) and all(r.kind == "pass" for r in rest)
    if confirmed:
        why = (
            f"fix confirmed: {base.variant} → {base.kind}"
            + (f" in {base.location}" if base.location else "")
            + "; "
            + ", ".join(f"{r.variant} → pass" for r in rest)
        )
    elif base.kind == "pass":
        why = f"not confirmed: the baseline {base.variant} passes (nothing to fix here)"
    elif not reproduced:
        why = (
            f"not confirmed: the baseline {base.variant} did not reproduce a failure ({base.kind})"
        )
    else:
        bad = [f"{r.variant} → {r.kind}" for r in rest if r.kind != "pass"]
        why = "not confirmed: " + ", ".join(bad or ["no fix variant given"])
    return rows, confirmed, why
