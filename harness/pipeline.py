"""The data flow of `harness run` and `harness watch`:
pin → verify → prepare variant → build → run under the watchdog → classify → check → report.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import build as buildmod
from harness import checks as checksmod
from harness import classify, dashboard, variants
from harness import probe as probemod
from harness.config.pin import Pin, Verification, check_env, load_pin, verify_path_source
from harness.config.scenario import RunSettings, Scenario, load_scenario
from harness.errors import BUILD_FAILED, USAGE, HarnessError, Interrupted
from harness.execute import runner
from harness.execute.watchdog import Limits
from harness.report import Report, new_run_id


@dataclass
class RunOptions:
    env: str
    pin: str | None = None
    scenario: str | None = None
    variant: str = "stock"
    timeout_s: float | None = None
    startup_s: float | None = None
    stall_s: float | None = None
    steps: int | None = None
    trainer_env: dict[str, str] = field(default_factory=dict)
    trainer_args: list[str] = field(default_factory=list)
    report_dir: Path = Path("reports")
    checkout: Path | None = None
    allow_drift: bool = False
    commit: str | None = (
        None  # git pins: build this commit's tree (bisect) instead of the checkout's
    )
    sampling: runner.SampleOptions = field(default_factory=runner.SampleOptions)
    tee: bool = False
    harness_argv: list[str] = field(default_factory=list)


@dataclass
class WatchOptions:
    argv: list[str]
    timeout_s: float
    startup_s: float
    stall_s: float
    parser: str = "lines"
    cwd: Path = Path(".")
    trainer_env: dict[str, str] = field(default_factory=dict)
    report_dir: Path = Path("reports")
    sampling: runner.SampleOptions = field(default_factory=runner.SampleOptions)
    tee: bool = False
    harness_argv: list[str] = field(default_factory=list)


def default_pin(checkout: Path | None) -> str:
    """pufferlib-5.0 when a checkout is configured, else the embedded replica."""
    configured = checkout or os.environ.get("HARNESS_CHECKOUT")
    return "pufferlib-5.0" if configured else "replica"


def verify_source(pin: Pin, checkout: Path | None) -> tuple[Verification, Path]:
    """Verify the pinned source and return it with the folder to prepare from."""
    if pin.source.kind == "path":
        root = pin.source_root
        assert root is not None
        if not root.is_dir():
            raise HarnessError(f"pin {pin.name}: source folder {root} is missing", USAGE)
        return verify_path_source(pin, root), root
    from harness import upstream  # git and PyPI sources need GitPython / downloads

    return upstream.verify_external(pin, checkout)


def prepare_tree(
    pin: Pin, root: Path, variant: str, commit: str | None = None
) -> tuple[Path, variants.Applied]:
    """A scratch copy of the source (the checkout's working tree, or `commit`'s tree) with
    the variant applied. The user's checkout is only read."""
    steps = variants.parse_variant(variant, pin)
    scratch = buildmod.new_scratch_tree()
    try:
        prepared: list[str] = []
        if pin.source.kind == "path":
            buildmod.copy_source(root, scratch, skip=frozenset(pin.build_outputs))
            apply_ref = None
        elif pin.source.kind == "pypi":
            from harness import pypi

            prepared = pypi.unpack(pin, root, scratch)
            apply_ref = None
        else:
            from harness import upstream

            upstream.export_tree(pin, root, scratch, commit)
            apply_ref = upstream.ref_applier(pin, root, base=commit)
        applied = variants.apply_steps(scratch, steps, pin, apply_ref)
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
    )


def _record_outcome(report: Report, outcome: runner.RunOutcome, sigs: classify.Signatures) -> None:
    report.trigger = outcome.trigger.value
    report.exit = {
        "returncode": outcome.returncode,
        "signal": outcome.signal,
        "killed_by_harness": outcome.returncode is None,
        "reason": outcome.reason,
        "pid": outcome.pid,
    }
    report.timings.update(
        run_s=outcome.duration_s,
        first_progress_s=outcome.first_progress_s,
        sampling_s=outcome.sampling_s,
    )
    complete = [f for f in outcome.frames if f.complete]
    report.progress = {
        "frames": len(complete),
        "partial_frames": len(outcome.frames) - len(complete),
        "progress_events": outcome.progress_events,
        "output_lines": outcome.output_lines,
        "last_metrics": dashboard.latest(outcome.frames),
        "measured_sps": dashboard.measured_sps(complete),
        "progressing_at_end": outcome.progressing_at_end,
        "output_tail": outcome.output_tail[-20:],
    }
    report.samples = outcome.samples
    report.cleanup = {
        "killed": outcome.cleanup.killed,
        "reaped": outcome.cleanup.reaped,
        "leftover": outcome.cleanup.leftover,
    }
    if outcome.cleanup.leftover:
        report.notes.append(f"processes left after cleanup: {outcome.cleanup.leftover}")
    report.verdict = classify.classify(
        outcome.trigger,
        outcome.reason,
        outcome.returncode,
        outcome.progressing_at_end,
        outcome.samples,
        outcome.output_tail,
        sigs,
    )
    if outcome.interrupt_signal:
        report.verdict.exit_code = 128 + outcome.interrupt_signal


def _interrupted_code(outcome: runner.RunOutcome) -> int | None:
    return 128 + outcome.interrupt_signal if outcome.interrupt_signal else None


def run_env(opts: RunOptions) -> tuple[Report, int]:
    scenario: Scenario = load_scenario(opts.scenario or opts.env)
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    settings = scenario.settings(pin.name)
    check_env(pin, settings.upstream_env)
    report = Report(
        new_run_id(f"{scenario.env}-{opts.variant}"),
        Path(),
        opts.harness_argv,
        "run",
        env=scenario.env,
    )
    report.directory = opts.report_dir / report.run_id
    report.limits = vars(limits_for(opts, settings))
    report.variant = {"spec": opts.variant}
    report.pin = {
        "name": pin.name,
        "file": str(pin.file),
        "source": vars(pin.source),
        "variants": dict(pin.variants),
    }
    report.save("pin")
    with finishing(report):
        return _run_env_stages(opts, scenario, pin, settings, report)


@contextlib.contextmanager
def finishing(report: Report) -> Iterator[None]:
    """Whatever ends a run early (a usage error, a missing tool, a signal, a harness bug)
    leaves a finished report that says so, not one stuck at status "running"."""
    try:
        yield
    except HarnessError as exc:
        report.notes.append(exc.message)
        if exc.exit_code == BUILD_FAILED and report.verdict is None:
            report.verdict = classify.Verdict(
                "build-failed",
                f"build failed: {exc.message}",
                evidence=[exc.message],
                exit_code=BUILD_FAILED,
            )
        report.finish("failed")
        raise
    except Interrupted as exc:
        report.notes.append(f"interrupted by signal {exc.signum} at stage {report.stage}")
        report.verdict = report.verdict or classify.Verdict(
            "interrupted", f"interrupted at stage {report.stage}", exit_code=128 + exc.signum
        )
        report.finish("interrupted")
        raise
    except Exception as exc:
        report.notes.append(f"harness error: {exc!r}")
        report.finish("failed")
        raise


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
) -> Built:
    """pin → verify → prepare the variant's tree → build (cached). Shared by run, build,
    compare and bisect. With `commit` (bisect), the tree is that commit's, identified by
    its hash: the pin's file hashes describe one commit only and are not checked."""
    if commit is not None:
        from harness import upstream

        root = upstream.locate_checkout(pin, checkout)
        verification = Verification("unchecked", f"git {root} at {commit}", commit_actual=commit)
        verification.notes.append("bisect step: the source is identified by its commit hash")
    else:
        verification, root = verify_source(pin, checkout)
    if report is not None:
        report.pin["verification"] = {**asdict(verification), "summary": verification.describe()}
    if verification.status == "drift" and not allow_drift:
        raise HarnessError(
            f"pin {pin.name}: source does not match the pin ({verification.describe()}); "
            "run `harness pin verify` for details or pass --allow-drift",
            USAGE,
        )
    if report is not None:
        report.save("prepare")
    prepared, applied = prepare_tree(pin, root, variant, commit)
    if report is not None:
        report.variant.update(steps=applied.steps, changes=applied.changes)
        report.save("build")
    result = buildmod.build(prepared, pin, env, applied.build_env)
    return Built(verification, applied, result)


def build_failed_verdict(built: buildmod.BuildResult) -> classify.Verdict:
    hint = f" (hint: {built.hint})" if built.hint else ""
    return classify.Verdict(
        "build-failed",
        f"build failed: {built.first_error}{hint}",
        evidence=[
            built.first_error,
            *([f"hint: {built.hint}"] if built.hint else []),
            f"build log: {built.log_path}",
        ],
        exit_code=BUILD_FAILED,
    )


def _run_env_stages(
    opts: RunOptions, scenario: Scenario, pin: Pin, settings: RunSettings, report: Report
) -> tuple[Report, int]:
    sigs = classify.load_signatures().with_own(pin.signatures)
    built = verify_prepare_build(
        pin,
        settings.upstream_env,
        opts.variant,
        opts.checkout,
        opts.allow_drift,
        report,
        commit=opts.commit,
    ).result
    report.build = built.to_json()
    report.timings["build_s"] = built.duration_s
    if not built.ok:
        report.verdict = build_failed_verdict(built)
        report.finish()
        return report, BUILD_FAILED
    steps = opts.steps if opts.steps is not None else settings.steps
    argv = shlex.split(pin.render_run(settings.upstream_env, steps, shlex.quote(str(built.tree))))
    argv += list(settings.args) + opts.trainer_args
    overrides = {**pin.run_env, **settings.env, **opts.trainer_env}
    run_dir = built.tree
    if pin.run_cwd == "report":  # a trainer that writes into its cwd gets its own folder
        run_dir = report.artifact("workdir")
        run_dir.mkdir(parents=True, exist_ok=True)
    spec = runner.RunSpec(
        argv=argv,
        cwd=run_dir,
        env=runner.command_env(overrides),
        parser=pin.parser,
        log_path=report.artifact("output.log"),
    )
    report.command = {"argv": argv, "cwd": str(run_dir), "env": overrides, "steps": steps}
    report.save("run")
    sampling = opts.sampling
    if not sampling.own_roots:
        sampling = runner.SampleOptions(**{**vars(sampling), "own_roots": (str(built.tree),)})
    outcome = runner.run_watched(
        spec,
        limits_for(opts, settings),
        sampling,
        echo=sys.stderr if opts.tee else None,
    )
    _record_outcome(report, outcome, sigs)
    report.save("check")
    verdict = report.verdict
    assert verdict is not None
    interrupted = _interrupted_code(outcome)
    if verdict.kind != "pass":
        # a hang, crash or error exit is the finding; its checks would only repeat it
        report.notes.append(f"checks not evaluated: the run ended in {verdict.kind}")
    elif interrupted is None:
        report.checks, config_source = checksmod.run_checks(
            scenario.checks,
            pin.name,
            [f for f in outcome.frames if f.complete],
            built.tree,
            run_dir,
            settings.upstream_env,
            argv,
            settings.config_files or pin.config_files,
            outcome.started_at,
            steps,
        )
        report.notes.append(f"config for checks read from {config_source}")
        checksmod.apply_to_verdict(verdict, report.checks)
    report.finish("interrupted" if interrupted else "complete")
    return report, interrupted if interrupted is not None else verdict.exit_code


def watch_command(opts: WatchOptions) -> tuple[Report, int]:
    if not opts.argv:
        raise HarnessError("harness watch needs a command after '--'", USAGE)
    try:
        dashboard.get_parser(opts.parser)  # unknown parser: usage error before anything runs
    except ValueError as exc:
        raise HarnessError(str(exc), USAGE) from exc
    exe = opts.argv[0]
    if shutil.which(exe, path=os.environ.get("PATH")) is None and not Path(opts.cwd, exe).exists():
        raise HarnessError(f"command not found: {exe}", USAGE)
    report = Report(new_run_id(f"watch-{Path(exe).name}"), Path(), opts.harness_argv, "watch")
    report.directory = opts.report_dir / report.run_id
    limits = Limits(opts.timeout_s, opts.startup_s, opts.stall_s)
    report.limits = vars(limits)
    report.command = {
        "argv": opts.argv,
        "cwd": str(opts.cwd),
        "env": opts.trainer_env,
        "parser": opts.parser,
    }
    report.save("run")
    spec = runner.RunSpec(
        argv=list(opts.argv),
        cwd=opts.cwd,
        env=runner.command_env(opts.trainer_env),
        parser=opts.parser,
        log_path=report.artifact("output.log"),
    )
    with finishing(report):
        outcome = runner.run_watched(
            spec, limits, opts.sampling, echo=sys.stderr if opts.tee else None
        )
    _record_outcome(report, outcome, classify.load_signatures())
    interrupted = _interrupted_code(outcome)
    report.finish("interrupted" if interrupted else "complete")
    verdict = report.verdict
    assert verdict is not None
    return report, interrupted if interrupted is not None else verdict.exit_code


def parse_trainer_env(items: Sequence[str]) -> dict[str, str]:
    return runner.split_assignments(items, "--env")


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


def compare_variants(
    opts: RunOptions, variant_specs: Sequence[str]
) -> tuple[list[CompareRow], bool, str]:
    """Run the scenario once per variant. The fix is confirmed when the first variant (the
    baseline, normally stock) fails and every other variant passes."""
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    for spec in variant_specs:  # a typo in the last variant fails now, not after the others
        variants.parse_variant(spec, pin)
    rows: list[CompareRow] = []
    for spec in variant_specs:
        sub = RunOptions(**{**vars(opts), "variant": spec})
        try:
            report, code = run_env(sub)
        except HarnessError as exc:  # this variant could not run: a row, not an abort
            rows.append(
                CompareRow(spec, "error", None, None, None, None, [exc.message], exc.exit_code, "")
            )
            continue
        v = report.verdict
        last = report.progress.get("last_metrics") or {}
        rows.append(
            CompareRow(
                variant=spec,
                kind=v.kind if v else report.status,
                location=v.location if v else None,
                mechanism=v.mechanism if v else None,
                epochs=last.get("epoch"),
                sps=last.get("SPS"),
                checks_failed=[c.name for c in report.checks if c.status == "fail"],
                exit_code=code,
                report_dir=str(report.directory),
            )
        )
        if code >= 128:  # interrupted: stop comparing
            break
    base, rest = rows[0], rows[1:]
    # the baseline must reproduce a failure (not merely fail to build or run)
    reproduced = base.kind in ("hang", "crash", "error-exit", "check-failed")
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


@dataclass
class CheckOptions:
    target: Path  # a report folder, its report.json, or a raw output log
    scenario: str | None = None
    pin: str | None = None
    parser: str | None = None
    steps: int | None = None


def check_saved(opts: CheckOptions) -> tuple[list[checksmod.CheckResult], str]:
    """Re-run a scenario's checks on a saved report or output log, without the trainer."""
    import json

    target = opts.target
    report_json = target / "report.json" if target.is_dir() else target
    saved: dict[str, object] = {}
    if report_json.name == "report.json" and report_json.is_file():
        try:
            saved = json.loads(report_json.read_text())
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{report_json}: not a harness report: {exc}", USAGE) from exc
        log = report_json.with_name("output.log")
    elif target.is_file():
        log = target
    else:
        raise HarnessError(f"{target}: no such report folder or output log", USAGE)
    pin_info = _table_of(saved, "pin")
    pin_file = Path(str(pin_info.get("file", "")))
    pin_ref = opts.pin or (str(pin_file) if pin_file.is_file() else pin_info.get("name"))
    pin = load_pin(str(pin_ref or "replica"))
    scenario_name = opts.scenario or (str(saved["env"]) if saved.get("env") else None)
    if scenario_name is None:
        raise HarnessError("a raw output log needs --scenario NAME", USAGE)
    scenario = load_scenario(scenario_name)
    settings = scenario.settings(pin.name)
    command = _table_of(saved, "command")
    steps = opts.steps if opts.steps is not None else command.get("steps")
    text = log.read_bytes().decode("utf-8", "replace") if log.is_file() else ""
    try:
        parsed = dashboard.parse_text(opts.parser or pin.parser, text)
    except ValueError as exc:  # an unknown --parser
        raise HarnessError(str(exc), USAGE) from exc
    # the same evaluation as the live run: the build's config files and, while they still
    # exist, the run's own end-of-run logs in its working folder
    nowhere = Path("/nonexistent")
    tree = Path(str(_table_of(saved, "build").get("tree") or nowhere))
    run_dir = Path(str(command.get("cwd") or nowhere))
    results, _ = checksmod.run_checks(
        scenario.checks,
        pin.name,
        [f for f in parsed if f.complete],
        tree,
        run_dir,
        settings.upstream_env,
        [str(a) for a in _list_of(command, "argv")],
        settings.config_files or pin.config_files,
        _epoch(saved.get("started_at")),
        int(str(steps)) if steps else None,
    )
    return results, f"{sum(f.complete for f in parsed)} frames from {log}"


def _table_of(data: dict[str, object], key: str) -> dict[str, object]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _list_of(data: dict[str, object], key: str) -> list[object]:
    value = data.get(key)
    return value if isinstance(value, list) else []


def _epoch(stamp: object) -> float:
    """A report's started_at as a Unix time; without one, no end-of-run log is trusted."""
    import datetime

    try:
        return datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return float("inf")


def probe_env(
    env: str,
    pin_name: str | None,
    variant: str,
    checkout: Path | None,
    steps: int,
    num_envs: int,
    seed: int,
) -> probemod.ProbeResult:
    """Compile the reward probe against the (variant's) env header and check its output."""
    scenario = load_scenario(env)
    pin = load_pin(pin_name or default_pin(checkout))
    settings = scenario.settings(pin.name)
    probemod.probe_spec(pin)  # a pin without a probe driver fails before any checkout work
    _verification, root = verify_source(pin, checkout)
    tree, _applied = prepare_tree(pin, root, variant)
    try:
        out = tree / ".probe"
        out.mkdir()
        binary = probemod.compile_driver(pin, tree, settings.upstream_env, out)
        data = probemod.run_driver(binary, num_envs, steps, seed)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    bounds = scenario.raw.get("probe", {})
    return probemod.ProbeResult(env, data, probemod.evaluate(data, bounds))
