"""`harness triage ENV`: the steps in their order within the budget (triage/budget.py), each
recorded in triage.json as soon as it ends, resumable, and told together at the end
(docs/triage.md).

The folder is `<report-dir>/<run id>/`: triage.json (written atomically after every step:
an interrupted or killed triage leaves the steps it finished and the current one pending),
`steps/<step>/…` (each step's runs and their tables), and the story (triage/story.py:
triage.html, issue.md). `--resume DIR` reads DIR/triage.json back, keeps the steps that are
done and runs the others; builds are cached anyway."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path

from harness import outcome
from harness.config.defaults import compare_baseline, default_pin
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import load_scenario
from harness.doctor.fingerprint import HostFingerprint, take_fingerprint
from harness.errors import HarnessError, Interrupted
from harness.filenames import TRIAGE_JSON
from harness.files import atomic_write
from harness.outcome import TriageExit
from harness.pipeline.options import option_flags
from harness.pipeline.stages import limits_for
from harness.report import store
from harness.report.model import now_stamp
from harness.report.reading import read_json
from harness.triage import budget, explain, fixes, knobs, steps
from harness.triage.model import SCHEMA_VERSION, Step, TriageOptions, TriageResult
from harness.triage.results import ExplainResult, FixesResult, HistoryResult, ReproduceResult
from harness.vocab import SourceKind, StepStatus, TriageStep

TRIAGE_JSON_LIMIT = 8 * 1024 * 1024  # a triage.json is a few KB; more is not ours

StepFn = Callable[[steps.Context], Step]


def run_triage(opts: TriageOptions) -> TriageResult:
    """Every step that fits, most informative first; triage.json after each; the story at
    the end. An interrupt leaves triage.json with the current step pending, then goes on."""
    run = opts.run
    pin = load_pin(run.pin or default_pin(run.checkout))
    settings = load_scenario(run.scenario or run.env).settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    result = _resume(opts) if opts.resume is not None else _new(opts, pin)
    limits = limits_for(run, settings)
    costs = _costs(
        result, opts, budget.first_guess(limits.startup_s, limits.stall_s, limits.wall_s)
    )
    ctx = steps.Context(
        opts=opts,
        result=result,
        pin=pin,
        progress=run.progress,
        costs=costs,
        deadline=time.monotonic() + opts.budget_s,
        hosts=pin.triage.hosts,
    )
    session_start = time.monotonic()
    spent_before = result.spent_s
    try:
        for name in budget.ORDER:
            step = result.step(name)
            if step.status is StepStatus.DONE:
                continue
            _one_step(ctx, name)
            result.spent_s = spent_before + time.monotonic() - session_start
            save(result)
    except Interrupted:
        result.spent_s = spent_before + time.monotonic() - session_start
        save(result)
        raise
    finally:
        run.progress.close()
    _conclude(ctx)
    result.finished_at = now_stamp()
    result.spent_s = spent_before + time.monotonic() - session_start
    save(result)
    _story(result)
    return result


def _new(opts: TriageOptions, pin: Pin) -> TriageResult:
    root = opts.run.report_dir
    store.check_report_dir(root)
    folder = root / store.new_run_id(f"triage-{opts.run.env}")
    folder.mkdir(parents=True)
    result = TriageResult(
        env=opts.run.env,
        directory=folder,
        steps=[Step(name) for name in TriageStep],
        pin=pin.name,
        started_at=now_stamp(),
        budget_s=opts.budget_s,
    )
    save(result)
    return result


def _resume(opts: TriageOptions) -> TriageResult:
    """DIR/triage.json read bounded; a damaged file, a newer schema or another env's
    triage is one line (exit 5)."""
    folder = opts.resume
    assert folder is not None
    data = read_json(folder, TRIAGE_JSON, "not a harness triage", TRIAGE_JSON_LIMIT)
    where = folder / TRIAGE_JSON
    if not isinstance(data, dict) or data.get("mode") != "triage":
        raise HarnessError(f"{where}: not a harness triage", outcome.USAGE)
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise HarnessError(f"{where}: schema_version {version!r} is not a number", outcome.USAGE)
    if version > SCHEMA_VERSION:
        raise HarnessError(
            f"{where}: schema_version {version} is newer than this harness reads "
            f"({SCHEMA_VERSION}): upgrade the harness",
            outcome.USAGE,
        )
    try:
        result = TriageResult.from_json(data, folder)
    except (KeyError, ValueError, TypeError, OverflowError) as exc:
        raise HarnessError(f"{where}: damaged triage: {exc}", outcome.USAGE) from None
    if result.env != opts.run.env:
        raise HarnessError(
            f"{where} is a triage of {result.env}, not {opts.run.env}", outcome.USAGE
        )
    pin = load_pin(opts.run.pin or default_pin(opts.run.checkout)).name
    if result.pin and result.pin != pin:  # the finished steps are of that pin's runs
        raise HarnessError(
            f"{where} is a triage with pin {result.pin}, not {pin}: resume with --pin {result.pin}",
            outcome.USAGE,
        )
    known = {s.name for s in result.steps}
    result.steps += [Step(n) for n in TriageStep if n not in known]
    for s in result.steps:
        if s.status is not StepStatus.DONE:  # run again: what it made last time is kept
            s.runs_made = s.builds_made = 0
    result.finished_at = None
    result.budget_s += opts.budget_s
    return result


def _costs(result: TriageResult, opts: TriageOptions, guess: float) -> budget.Costs:
    """What a run and a build cost: measured by a finished Reproduce, else a first guess."""
    r = result.found(ReproduceResult)
    costs = budget.Costs(run_s=guess, jobs=opts.jobs)
    if result.step(TriageStep.REPRODUCE).status is StepStatus.DONE:
        costs.run_s = r.run_s or guess
        costs.build_s = r.build_s or budget.DEFAULT_BUILD_S
        costs.cache_warm = bool(r.cache_warm)
    return costs


def save(result: TriageResult) -> None:
    """triage.json, whole or not at all."""
    import json

    atomic_write(result.directory / TRIAGE_JSON, json.dumps(result.to_json(), indent=2) + "\n")


# ------------------------------------------------------------------------------ one step


def _estimate(ctx: steps.Context, name: TriageStep) -> float:
    c = ctx.costs
    built = {compare_baseline()}
    if name is TriageStep.REPRODUCE:
        return budget.estimate_reproduce(c)
    if name is TriageStep.EXPLAIN:
        return budget.estimate_explain()
    if name is TriageStep.FIXES:
        specs, _ = fixes.fix_specs(ctx)
        return budget.estimate_fixes(c, len(specs), len(set(specs) - built))
    if name is TriageStep.KNOBS:
        cells = sum(len(k.values) for k in ctx.knobs)
        return budget.estimate_knobs(c, cells, 0)
    return budget.estimate_history(c)


def _not_applicable(ctx: steps.Context, name: TriageStep) -> str | None:
    """Why a step has nothing to work on (before its cost is looked at)."""
    if name is TriageStep.REPRODUCE:
        return None
    repro = ctx.result.step(TriageStep.REPRODUCE)
    if repro.status is not StepStatus.DONE:
        return f"Reproduce did not run ({repro.status}: {repro.reason})"
    found = ctx.result.found(ReproduceResult)
    if not found.first_failure:
        if name is TriageStep.HISTORY and found.hazards:
            return None  # the hazards the runs saw are bisected instead (docs/hazards.md)
        return "nothing reproduced here: " + found.summary
    if name is TriageStep.KNOBS:
        top = ctx.result.found(ExplainResult).causes
        ctx.knobs = knobs.knobs_of(ctx.pin, top[0].id if top else found.cause)
        if not ctx.knobs:
            return "no knobs: the pin declares none and the top cause suggests none"
    return None


def _one_step(ctx: steps.Context, name: TriageStep) -> None:
    result = ctx.result
    index = next(i for i, s in enumerate(result.steps) if s.name is name)
    why = _not_applicable(ctx, name)
    if name in ctx.opts.skip:
        why = f"skipped on request (--skip {name})"
    if why is not None:
        result.steps[index] = Step(name, StepStatus.SKIPPED, reason=why)
        return
    estimate = _estimate(ctx, name)
    left = ctx.left()
    ctx.progress.phase(name, f"{budget.shown(estimate)}, {max(0.0, left):.0f} s left")
    too_big = budget.skip_reason(estimate, left)
    # Reproduce: always a first round; History of a path source: says why it does not apply
    exempt = name is TriageStep.REPRODUCE or (
        name is TriageStep.HISTORY and ctx.pin.source.kind is not SourceKind.GIT
    )
    if too_big is not None and not exempt:
        result.steps[index] = Step(name, StepStatus.SKIPPED, reason=too_big, estimate_s=estimate)
        return
    start = time.monotonic()
    _set_aside(ctx.folder(name))
    pending = Step(name, estimate_s=round(estimate, 1))
    result.steps[index] = pending
    save(result)
    try:
        step = _run(ctx, name)
    except HarnessError as exc:
        step = Step(name, StepStatus.FAILED, reason=exc.message)
    except Interrupted:
        pending.duration_s = round(time.monotonic() - start, 1)
        raise
    step.estimate_s = round(estimate, 1)
    step.duration_s = round(time.monotonic() - start, 1)
    result.steps[index] = step


def _set_aside(folder: Path) -> None:
    """The runs of an earlier, unfinished try of a step (an interrupted triage, resumed):
    kept beside it, never mixed into the new try's run folders."""
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or folder.parent.is_symlink():  # a resumed folder's own, only
        raise HarnessError(f"{folder}: a symbolic link; a triage folder's steps are its own")
    n = 1
    while (aside := folder.with_name(f"{folder.name}.unfinished-{n}")).exists():
        n += 1
    folder.rename(aside)


def _run(ctx: steps.Context, name: TriageStep) -> Step:
    if name is TriageStep.HISTORY:
        return _history(ctx)
    fns: dict[TriageStep, StepFn] = {
        TriageStep.REPRODUCE: steps.reproduce,
        TriageStep.EXPLAIN: explain.explain,
        TriageStep.KNOBS: knobs.knobs,
        TriageStep.FIXES: fixes.fixes,
    }
    return fns[name](ctx)


def _history(ctx: steps.Context) -> Step:
    """triage/history.py's step, where it is installed."""
    try:
        from harness.triage.history import history_step  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as exc:  # not installed yet; a broken import is a bug
        if exc.name != "harness.triage.history":
            raise
        return Step(TriageStep.HISTORY, StepStatus.SKIPPED, reason="not available")
    step: Step = history_step(ctx.opts, ctx.result, ctx.left(), ctx.progress)
    return step


# ---------------------------------------------------------------------------- the story


def _conclude(ctx: steps.Context) -> None:
    """What the steps say together: reproduced, the fix, the first bad commit, a line each,
    and the exact commands."""
    result = ctx.result
    fixes = result.step(TriageStep.FIXES)
    history = result.step(TriageStep.HISTORY)
    result.reproduced = bool(result.found(ReproduceResult).first_failure)
    done_fixes, done_history = (s.status is StepStatus.DONE for s in (fixes, history))
    result.fix_confirmed = fixes.found(FixesResult).fix_variant if done_fixes else None
    first_bad = history.found(HistoryResult).first_bad if done_history else None
    result.first_bad = first_bad.sha if first_bad is not None else None
    lines = []
    for s in result.steps:
        if s.status is StepStatus.DONE:
            lines.append(f"{s.name}: {s.headline}")
        else:
            lines.append(f"{s.name}: {s.status} ({s.reason})")
    result.conclusion = lines
    result.commands = commands(ctx)
    result.host = _fingerprint(ctx)


def commands(ctx: steps.Context) -> list[str]:
    """`harness run …` that reproduces it here, and `harness compare …` that confirms the
    fix, with the triage's own setup (pin, scenario, limits, host)."""
    env = ctx.opts.run.env
    base = ctx.base()
    flags = option_flags(base, watch=True)
    baseline = compare_baseline()
    out = [shlex.join(["harness", "run", env, "--variant", baseline, *flags])]
    if ctx.result.reproduced:
        out[0] += " --repeat " + str(budget.FIRST_ROUND)
    fix = ctx.result.fix_confirmed
    if fix:
        variants = f"{baseline},{fix}"
        out.append(shlex.join(["harness", "compare", env, "--variants", variants, *flags]))
    return out


def _fingerprint(ctx: steps.Context) -> HostFingerprint:
    import os

    env = {**os.environ, **ctx.base().conditions.env, **ctx.opts.run.trainer_env}
    cpus = ctx.base().conditions.cpus
    return take_fingerprint(env, list(cpus) if cpus is not None else None)


def _story(result: TriageResult) -> list[Path]:
    """triage.html and issue.md (triage/story.py), where it is installed; a story that
    cannot be written is a line of the conclusion, never a lost triage."""
    try:
        from harness.triage.story import write_story  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name != "harness.triage.story":
            raise
        return []
    try:
        written: list[Path] = write_story(result)
    except (OSError, HarnessError) as exc:
        result.conclusion.append(f"the story could not be written: {exc}")
        save(result)
        return []
    return written


# ------------------------------------------------------------------------------ exit code


def exit_code(result: TriageResult) -> int:
    """The code of what the triage found (outcome.TriageExit); bad input (5) when
    Reproduce could not run for another reason than its build."""
    repro = result.step(TriageStep.REPRODUCE)
    if repro.status is StepStatus.FAILED:  # could not run (a build failed): no answer
        failed_build = repro.reason.startswith("the build of")
        return TriageExit.BUILD_FAILED if failed_build else outcome.USAGE
    if not result.reproduced:
        return TriageExit.NOT_REPRODUCED
    return TriageExit.FIXED if result.fix_confirmed else TriageExit.NOT_FIXED
