"""`harness run` and `harness watch`: the run under the watchdog, its verdict, its checks and
its report, which is finished on every exit path (`finishing`)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import dashboard
from harness.analysis import checks as checksmod
from harness.analysis import classify, endlogs
from harness.analysis.causes import checked_rules
from harness.config.defaults import default_pin
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import RunSettings, Scenario, load_scenario
from harness.config.signatures import Signatures, load_signatures
from harness.doctor.fingerprint import take_fingerprint
from harness.errors import HarnessError, Interrupted
from harness.execute import runner
from harness.execute.conditions import check_available
from harness.filenames import OUTPUT_LOG, REPORT_JSON
from harness.outcome import BUILD_FAILED, USAGE, Kind, interrupted_code
from harness.pipeline import hazards as hazard_stage
from harness.pipeline import workdir
from harness.pipeline.diagnose import diagnose
from harness.pipeline.epochs import check_whole_epochs
from harness.pipeline.evidence import save_build_evidence, save_endlog_evidence
from harness.pipeline.options import RunOptions, WatchOptions, option_flags
from harness.pipeline.stages import (
    build_failed_verdict,
    limits_for,
    verify_prepare_build,
)
from harness.report import store
from harness.report.live import LiveProgress
from harness.report.model import (
    CONFIG_EVIDENCE,
    RUN_EVIDENCE,
    Cleanup,
    CommandInfo,
    ExitInfo,
    PinInfo,
    Progress,
    Report,
    VariantInfo,
    plain,
)
from harness.vocab import Phase, RunMode, RunStatus, Stage
from harness.watch.watchdog import Limits


def _record_outcome(report: Report, outcome: runner.RunOutcome, sigs: Signatures) -> None:
    report.trigger = outcome.trigger
    report.exit = ExitInfo(
        returncode=outcome.returncode,
        signal=outcome.signal,
        killed_by_harness=outcome.returncode is None,
        reason=outcome.reason,
        pid=outcome.pid,
    )
    report.timings.run_s = outcome.duration_s
    report.timings.first_progress_s = outcome.first_progress_s
    report.timings.sampling_s = outcome.sampling_s
    complete = [f for f in outcome.frames if f.complete]
    report.progress = Progress(
        frames=len(complete),
        partial_frames=len(outcome.frames) - len(complete),
        progress_events=outcome.progress_events,
        output_lines=outcome.output_lines,
        last_metrics=dashboard.latest(outcome.frames),
        measured_sps=dashboard.measured_sps(complete),
        progressing_at_end=outcome.progressing_at_end,
        output_tail=outcome.output_tail[-20:],
        unparsed_lines=outcome.unparsed_lines,
        frames_total=outcome.frames_total,
    )
    report.notes += outcome.notes
    if outcome.unparsed_lines:
        report.notes.append(
            f"{outcome.unparsed_lines} output lines not parsed (the output outran the parser; "
            "output.log has every byte)"
        )
    report.samples = outcome.samples
    report.cleanup = Cleanup(
        killed=list(outcome.cleanup.killed),
        reaped=list(outcome.cleanup.reaped),
        leftover=list(outcome.cleanup.leftover),
    )
    if outcome.cleanup.leftover:
        report.notes.append(f"processes left after cleanup: {outcome.cleanup.leftover}")
    # how each condition was applied ("cpus 0 (sched_setaffinity, inherited)") is for people;
    # the affinity the trainer got is a fact of the host (report.host, harness diff)
    report.notes += [f"host: {line}" for line in outcome.conditions_applied]
    if report.host is not None and outcome.affinity is not None:
        report.host.trainer_affinity = sorted(outcome.affinity)
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
        report.verdict.become(Kind.INTERRUPTED, signum=outcome.interrupt_signal)


def _ticker(progress: LiveProgress) -> Callable[[runner.Tick], None]:
    def tick(t: runner.Tick) -> None:
        progress.update(t.elapsed_s, t.window, t.remaining_s, t.metrics, t.cpu_percent, t.phase)

    return tick


def _interrupted_code(outcome: runner.RunOutcome) -> int | None:
    return interrupted_code(outcome.interrupt_signal) if outcome.interrupt_signal else None


def _record_host(report: Report, spec: runner.RunSpec) -> None:
    """The conditions the run imposes and the host it runs on, before the launch (the
    trainer's own affinity is filled in from the outcome)."""
    report.conditions = spec.conditions
    report.host = take_fingerprint(spec.env, spec.conditions.cpus)


def run_env(opts: RunOptions) -> tuple[Report, int]:
    check_available(opts.conditions)  # a quota this host cannot give: now, not after a build
    scenario: Scenario = load_scenario(opts.scenario or opts.env)
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    settings = scenario.settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    checked_rules(pin.causes)  # a pin's bad [[causes]] fails now, not after the run
    if opts.steps is not None:
        check_whole_epochs(opts, scenario, pin, settings, opts.steps)
    store.check_report_dir(opts.report_dir)  # a folder that cannot hold a report: now, not after
    run_id = store.new_run_id(f"{scenario.env}-{opts.variant}")
    report = Report(run_id, opts.report_dir / run_id, list(opts.harness_argv), RunMode.RUN).claim()
    try:
        # from here on every exit path (a signal too) leaves a finished report
        with finishing(report):
            _start_report(opts, scenario, pin, settings, report)
            return _run_env_stages(opts, scenario, pin, settings, report)
    finally:
        opts.progress.close()  # the summary replaces the live line


def _start_report(
    opts: RunOptions, scenario: Scenario, pin: Pin, settings: RunSettings, report: Report
) -> None:
    """The report's first write: what runs, the pin and scenario as used (evidence/)."""
    report.env = scenario.env
    report.limits = limits_for(opts, settings)
    report.variant = VariantInfo(opts.variant)
    report.pin = PinInfo(
        name=pin.name,
        file=str(pin.file),
        lineage=list(pin.lineage),
        source=vars(pin.source),
        variants=dict(pin.variants),
    )
    # the pin (after `extends`) and the scenario as used: `harness check` reads these
    store.write_evidence(
        report, "pin", "pin.json", json.dumps(plain(pin.raw), indent=2, default=str) + "\n"
    )
    store.copy_evidence(report, "scenario", scenario.file.resolve(), "scenario.toml")
    store.save(report, Stage.PIN)


class RunInterrupted(Interrupted):
    """A signal after the run's report was started: that report is finished (status
    `interrupted`), and the command line names it."""

    def __init__(self, signum: int, report: Report, stage: str) -> None:
        super().__init__(signum)
        self.report = report
        self.stage = stage  # the stage the signal stopped

    def left(self) -> str:
        folder = self.report.directory
        failed = self.report.unwritten.get(REPORT_JSON)
        where = (
            f"report (status {self.report.status}): {folder}"
            if failed is None
            else f"the report could not be written in {folder}: {failed}"
        )
        return f"at stage {self.stage}; {where}"


@contextlib.contextmanager
def finishing(report: Report) -> Iterator[None]:
    """Whatever ends a run early (a usage error, a missing tool, a signal, a harness bug)
    leaves a finished report that says so, not one stuck at status "running". Writing it
    raises nothing of its own (a full disk is a note: `store.finish`)."""
    try:
        yield
    except HarnessError as exc:
        report.notes.append(exc.message)
        if exc.exit_code == BUILD_FAILED and report.verdict is None:
            report.verdict = classify.Verdict(
                Kind.BUILD_FAILED, f"build failed: {exc.message}", evidence=[exc.message]
            )
        store.finish(report, RunStatus.FAILED)
        raise
    except Interrupted as exc:
        stage = report.stage
        report.notes.append(f"interrupted by signal {exc.signum} at stage {stage}")
        report.verdict = report.verdict or classify.Verdict(
            Kind.INTERRUPTED, f"interrupted at stage {stage}", signum=exc.signum
        )
        store.finish(report, RunStatus.INTERRUPTED)
        if isinstance(exc, RunInterrupted):
            raise
        raise RunInterrupted(exc.signum, report, stage) from exc
    except Exception as exc:
        report.notes.append(f"harness error: {exc!r}")
        store.finish(report, RunStatus.FAILED)
        raise


def _run_env_stages(
    opts: RunOptions, scenario: Scenario, pin: Pin, settings: RunSettings, report: Report
) -> tuple[Report, int]:
    sigs = load_signatures().with_own(pin.signatures)
    built = verify_prepare_build(
        pin,
        settings.upstream_env,
        opts.variant,
        opts.checkout,
        opts.allow_drift,
        report,
        commit=opts.commit,
        progress=opts.progress,
    ).result
    report.build = built
    report.notes.extend(built.notes)  # a damaged cache entry was rebuilt: say why
    report.timings.build_s = built.duration_s
    config_files = settings.config_files or pin.config_files
    save_build_evidence(report, built.tree, built.log_path, config_files, settings.upstream_env)
    if not built.ok:
        report.verdict = build_failed_verdict(built)
        store.finish(report)
        return report, BUILD_FAILED
    steps = opts.steps if opts.steps is not None else settings.steps
    argv = shlex.split(pin.render_run(settings.upstream_env, steps, shlex.quote(str(built.tree))))
    argv += list(settings.args) + opts.trainer_args
    # the host profile's presets under the trainer's own --env
    overrides = {**pin.run_env, **settings.env, **opts.conditions.env, **opts.trainer_env}
    # the links into the tree live while the run is judged (frames name files through
    # them); the report keeps what the trainer wrote
    with workdir.linked(report, built.tree, pin) as run_dir:
        env = runner.command_env(overrides)
        if opts.hazards:
            hazard_stage.prepare(report, env, argv, run_dir)
        spec = runner.RunSpec(
            argv=argv,
            cwd=run_dir,
            env=env,
            parser=pin.parser,
            log_path=report.artifact(OUTPUT_LOG),
            conditions=opts.conditions,
        )
        report.command = CommandInfo(argv=argv, cwd=str(run_dir), env=overrides, steps=steps)
        _record_host(report, spec)
        store.save(report, Stage.RUN)
        sampling = opts.sampling
        if not sampling.own_roots:
            sampling = runner.SampleOptions(**{**vars(sampling), "own_roots": (str(built.tree),)})
        opts.progress.phase(Phase.RUN)
        outcome = runner.run_watched(
            spec,
            limits_for(opts, settings),
            sampling,
            echo=sys.stderr if opts.tee else None,
            on_tick=_ticker(opts.progress),
        )
        _record_outcome(report, outcome, sigs)
        if opts.hazards:
            hazard_stage.collect(report, opts.expect_hazard)
        diagnose(report, pin, opts.checkout, opts.commit, shlex.join(option_flags(opts)))
        endlog = save_endlog_evidence(report, run_dir, settings.upstream_env, outcome.started_at)
        if endlog is not None:
            report.progress.final_metrics = endlogs.log_metrics(endlog)
    store.save(report, Stage.CHECK)
    verdict = report.verdict
    assert verdict is not None
    interrupted = _interrupted_code(outcome)
    if verdict.kind != Kind.PASS:
        # a hang, crash or error exit is the finding; its checks would only repeat it
        report.notes.append(f"checks not evaluated: the run ended in {verdict.kind}")
    elif interrupted is None:
        opts.progress.phase(Phase.CHECKS)
        # read from the report's own copies (evidence/): `harness check` on this report,
        # here or on another machine, reads the same files and gets the same results
        report.checks, config_source = checksmod.run_checks(
            checksmod.CheckInputs(
                checks=scenario.checks,
                pin=pin.lineage,
                frames=[f for f in outcome.frames if f.complete],
                tree=report.artifact(CONFIG_EVIDENCE),
                run_dir=report.artifact(RUN_EVIDENCE),
                env=settings.upstream_env,
                argv=argv,
                config_files=config_files,
                started_at=0.0,  # evidence/run holds this run's end-of-run log only
                steps=steps,
            )
        )
        config_source = config_source.replace(f"{report.directory}/", "")
        report.notes.append(f"config for checks read from {config_source}")
        checksmod.apply_to_verdict(verdict, report.checks)
    hazard_stage.judge(report, opts.expect_hazard)
    store.finish(report, RunStatus.INTERRUPTED if interrupted else RunStatus.COMPLETE)
    return report, interrupted if interrupted is not None else verdict.exit_code


def check_watch(opts: WatchOptions) -> None:
    """What `harness watch` refuses before anything runs (a repeated watch too)."""
    if not opts.argv:
        raise HarnessError("harness watch needs a command after '--'", USAGE)
    try:
        dashboard.get_parser(opts.parser)  # unknown parser: usage error before anything runs
    except ValueError as exc:
        raise HarnessError(str(exc), USAGE) from exc
    exe = opts.argv[0]
    if shutil.which(exe, path=os.environ.get("PATH")) is None and not Path(opts.cwd, exe).exists():
        raise HarnessError(f"command not found: {exe}", USAGE)
    check_available(opts.conditions)  # a quota this host cannot give: before the report


def watch_command(opts: WatchOptions) -> tuple[Report, int]:
    check_watch(opts)
    store.check_report_dir(opts.report_dir)  # a folder that cannot hold a report: now, not after
    run_id = store.new_run_id(f"watch-{Path(opts.argv[0]).name}")
    report = Report(
        run_id, opts.report_dir / run_id, list(opts.harness_argv), RunMode.WATCH
    ).claim()
    limits = Limits(opts.timeout_s, opts.startup_s, opts.stall_s, opts.quiescent_s)
    report.limits = limits
    env = {**opts.conditions.env, **opts.trainer_env}  # presets under the command's --env
    report.command = CommandInfo(
        argv=list(opts.argv), cwd=str(opts.cwd), env=env, parser=opts.parser
    )
    spec_env = runner.command_env(env)
    spec = runner.RunSpec(
        argv=list(opts.argv),
        cwd=opts.cwd,
        env=spec_env,
        parser=opts.parser,
        log_path=report.artifact(OUTPUT_LOG),
        conditions=opts.conditions,
    )
    _record_host(report, spec)
    try:
        # from the first write to the last (a signal, a failure while diagnosing or
        # writing): a finished report, never one stuck at "running"
        with finishing(report):
            if opts.hazards:
                hazard_stage.prepare(report, spec_env, list(opts.argv), opts.cwd)
            store.save(report, Stage.RUN)
            opts.progress.phase(Phase.RUN)
            outcome = runner.run_watched(
                spec,
                limits,
                opts.sampling,
                echo=sys.stderr if opts.tee else None,
                on_tick=_ticker(opts.progress),
            )
            _record_outcome(report, outcome, load_signatures())
            if opts.hazards:
                hazard_stage.collect(report, opts.expect_hazard)
            diagnose(report, None)
            hazard_stage.judge(report, opts.expect_hazard)
            interrupted = _interrupted_code(outcome)
            store.finish(report, RunStatus.INTERRUPTED if interrupted else RunStatus.COMPLETE)
    finally:
        opts.progress.close()
    verdict = report.verdict
    assert verdict is not None
    return report, interrupted if interrupted is not None else verdict.exit_code
