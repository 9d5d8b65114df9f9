"""The steps before a run, shared by run, build, compare, probe and bisect: choose the pin,
verify its source, prepare the variant's tree (a scratch copy; the user's checkout is only
read) and build it (cached)."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import build as buildmod
from harness import variants
from harness.analysis.classify import Verdict
from harness.config.pin import Pin
from harness.config.scenario import RunSettings
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.pipeline.options import RunOptions
from harness.report import store
from harness.report.live import LiveProgress
from harness.report.model import Report
from harness.source import source_for, verify_source
from harness.source.verify import Verification
from harness.vocab import Phase, SourceStatus, Stage
from harness.watch.watchdog import DEFAULT_QUIESCENT_S, Limits


def prepare_tree(
    pin: Pin, root: Path, variant: str, commit: str | None = None
) -> tuple[Path, variants.Applied]:
    """A scratch copy of the source (the checkout's working tree, or `commit`'s tree) with
    the variant applied. The user's checkout is only read."""
    steps = variants.parse_variant(variant, pin)
    source = source_for(pin)
    scratch = buildmod.new_scratch_tree()
    try:
        prepared = source.export(root, scratch, commit)
        applied = variants.apply_steps(scratch, steps, pin, source.ref_applier(root, base=commit))
        applied.changes[:0] = prepared
        return scratch, applied
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def limits_for(opts: RunOptions, settings: RunSettings) -> Limits:
    return Limits(
        wall_s=opts.timeout_s if opts.timeout_s is not None else settings.timeout_s,
        startup_s=opts.startup_s if opts.startup_s is not None else settings.startup_s,
        stall_s=opts.stall_s if opts.stall_s is not None else settings.stall_s,
        quiescent_s=opts.quiescent_s if opts.quiescent_s is not None else DEFAULT_QUIESCENT_S,
    )


@dataclass
class Built:
    verification: Verification
    applied: variants.Applied
    result: buildmod.BuildResult


def verify_prepare_build(
    pin: Pin,
    env: str,
    variant: str,
    checkout: Path | None,
    allow_drift: bool,
    report: Report | None = None,
    commit: str | None = None,
    progress: LiveProgress | None = None,
) -> Built:
    """pin → verify → prepare the variant's tree → build (cached). With `commit` (bisect),
    the tree is that commit's, identified by its hash: the pin's file hashes describe one
    commit only and are not checked."""
    progress = progress or LiveProgress.off()
    progress.phase(Phase.VERIFY)
    if commit is not None:
        from harness.source.git import locate_checkout

        root = locate_checkout(pin, checkout)
        verification = Verification(
            SourceStatus.UNCHECKED, f"git {root} at {commit}", commit_actual=commit
        )
        verification.notes.append("bisect step: the source is identified by its commit hash")
    else:
        verification, root = verify_source(pin, checkout)
    if report is not None and report.pin is not None:
        report.pin.verification = {**asdict(verification), "summary": verification.describe()}
    if verification.status == SourceStatus.DRIFT and not allow_drift:
        raise HarnessError(
            f"pin {pin.name}: source does not match the pin ({verification.describe()}); "
            "run `harness pin verify` for details or pass --allow-drift",
            USAGE,
        )
    if report is not None:
        store.save(report, Stage.PREPARE)
    progress.phase(Phase.PREPARE, variant)
    prepared, applied = prepare_tree(pin, root, variant, commit)
    if report is not None:
        if report.variant is not None:
            report.variant.steps = list(applied.steps)
            report.variant.changes = list(applied.changes)
        store.save(report, Stage.BUILD)
    progress.phase(Phase.BUILD, f"{pin.name} {env}")
    result = buildmod.build(prepared, pin, env, applied.build_env)
    return Built(verification, applied, result)


def build_failed_verdict(built: buildmod.BuildResult) -> Verdict:
    hint = f" (hint: {built.hint})" if built.hint else ""
    return Verdict(
        Kind.BUILD_FAILED,
        f"build failed: {built.first_error}{hint}",
        evidence=[
            built.first_error,
            *([f"hint: {built.hint}"] if built.hint else []),
            f"build log: {built.log_path}",
        ],
    )
