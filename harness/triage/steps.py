"""The triage's own steps (docs/triage.md): Reproduce, Explain, Knobs and Fixes, each over
the existing pipelines (child runs through pipeline/repeat.py, a sweep per knob, a compare
of the fixes); History is triage/history.py's. Each fills a `Step` (its `result` keys are
documented in docs/triage.md) and leaves its runs under `steps/<step>/`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.config.causes import KNOB_DEFAULT
from harness.config.defaults import compare_baseline
from harness.config.hostprofile import load_host
from harness.config.pin import Pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.execute.conditions import HostConditions
from harness.outcome import Kind
from harness.pipeline.children import ChildRuns
from harness.pipeline.options import RunOptions
from harness.pipeline.repeat import (
    FAILED,
    Repeat,
    Target,
    build_each,
    progress_done,
    run_argv,
    run_limit,
    run_rounds,
)
from harness.pipeline.sweep import Knob
from harness.report.live import LiveProgress
from harness.report.load import load_report
from harness.report.matrix import write_matrix
from harness.report.repeat import combine, failure_rate, groups, repeat_matrix
from harness.report.runs import RunRow
from harness.triage import budget
from harness.triage.model import Step, TriageOptions, TriageResult
from harness.triage.results import HazardSeen, ReproduceResult, TriedHost
from harness.vocab import StepStatus, TriageStep

DEFAULT = KNOB_DEFAULT  # a knob's value where no override is given (Reproduce's runs)


@dataclass
class Context:
    """What every step reads: the options, the triage so far, the pin, the costs measured
    and the time left."""

    opts: TriageOptions
    result: TriageResult
    pin: Pin
    progress: LiveProgress
    costs: budget.Costs
    deadline: float  # time.monotonic() at which the budget is spent
    hosts: tuple[str, ...] = ()  # profiles Reproduce may try (the pin's triage.hosts)
    knobs: list[Knob] = field(default_factory=list)
    # Fixes' variants and those left out (with why), worked out once: a `ref:` fix may fetch
    fix_plan: tuple[list[str], list[str]] | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def folder(self, name: TriageStep) -> Path:
        return self.result.directory / "steps" / str(name)

    def rel(self, path: str | Path | None) -> str | None:
        """A path inside the triage folder as relative to it (how triage.json names runs)."""
        if path is None:
            return None
        try:
            return str(Path(path).resolve().relative_to(self.result.directory.resolve()))
        except ValueError:
            return str(path)

    def host(self) -> str | None:
        """The host profile Reproduce reproduced under (None: the host as it is)."""
        return self.result.found(ReproduceResult).host or None

    def base(self, host: str | None = None) -> RunOptions:
        """The runs of every step: the scenario's options and limits, the baseline variant,
        under the host profile that reproduced the failure (if one had to)."""
        run = self.opts.run.but(variant=compare_baseline(), progress=self.progress)
        host = host if host is not None else self.host()
        if host:
            profile = HostConditions.from_profile(load_host(host))
            run = run.but(conditions=profile.merged(self.opts.run.conditions))
        return run


def builds_made(builds: dict[str, str]) -> int:
    """Builds that were made (not cache hits, not failures) in a `build_each` answer."""
    return sum(1 for b in builds.values() if b.startswith("built"))


# ------------------------------------------------------------------------------- Reproduce


def _mixed(rows: Sequence[RunRow]) -> bool:
    rate = failure_rate(rows)
    return 0 < rate.failures < rate.runs


def _repeat(ctx: Context, step: Step, host: str | None) -> tuple[list[RunRow], Path]:
    """The baseline's runs under `host`: a first round, then to the cap (within the budget)
    when they ended both ways."""
    run = ctx.base(host or "")
    out = ctx.folder(TriageStep.REPRODUCE) / (f"host-{host}" if host else "stock")
    settings = load_scenario(run.scenario or run.env).settings(ctx.pin.lineage)
    builds = build_each(run, ctx.pin, [run.variant], settings.upstream_env)
    step.builds_made += builds_made(builds)
    built = builds[run.variant]
    if built.startswith(FAILED):
        raise HarnessError(f"the build of {run.variant} {built}")
    plan = Repeat(ctx.opts.repeat_cap, jobs=ctx.opts.jobs)
    target = Target(out, run_argv(run, run.variant), {}, run.variant)
    rows: dict[int, list[RunRow]] = {}
    first = min(budget.FIRST_ROUND, ctx.opts.repeat_cap)
    done = progress_done(ctx.progress)
    with ChildRuns() as runner:
        try:
            run_rounds([target], {0: first}, rows, plan, runner, run_limit(run, settings), done)
            if _mixed(rows[0]):  # a sometimes-failure: to the cap, as far as the budget allows
                ctx.costs.run_s = _mean_run_s(rows[0], ctx.costs.run_s)
                # at most half of what is left: the steps after it need time too
                cap = budget.cap_for(ctx.costs, 1, ctx.left() / 2, ctx.opts.repeat_cap)
                more = cap - len(rows[0])
                if more > 0:
                    run_rounds(
                        [target], {0: more}, rows, plan, runner, run_limit(run, settings), done
                    )
        finally:
            step.runs_made += len(rows.get(0, []))
            if rows.get(0):
                title = f"harness triage {run.env}: reproduce {run.variant}" + (
                    f" --host {host}" if host else ""
                )
                write_matrix(
                    repeat_matrix(title, run.env, rows[0], out), out, also_report_html=True
                )
    ctx.costs.run_s = _mean_run_s(rows[0], ctx.costs.run_s)
    if not builds[run.variant].startswith("cache hit"):
        ctx.costs.build_s = max(ctx.costs.build_s, _build_s(builds[run.variant]))
    else:
        ctx.costs.cache_warm = host is None or ctx.costs.cache_warm
    return rows[0], out


def _mean_run_s(rows: Sequence[RunRow], fallback: float) -> float:
    walls = [r.wall_s for r in rows if r.wall_s]
    return sum(walls) / len(walls) if walls else fallback


def _build_s(built: str) -> float:
    try:
        return float(built.split("built in ", 1)[1].split("s", 1)[0])
    except (IndexError, ValueError):
        return budget.DEFAULT_BUILD_S


def reproduce(ctx: Context) -> Step:
    """The baseline repeated until a rate can be stated; where it does not fail here, under
    each of the pin's host profiles in turn until one reproduces it."""
    step = Step(TriageStep.REPRODUCE)
    tried: list[TriedHost] = []
    found: tuple[list[RunRow], Path, str | None] | None = None
    for host in (None, *ctx.hosts):
        if host is not None and ctx.left() < budget.estimate_reproduce(ctx.costs):
            tried.append(TriedHost(host, "not tried: " + _no_time(ctx)))
            continue
        rows, out = _repeat(ctx, step, host)
        combined = combine(rows, {}, compare_baseline(), out)
        tried.append(TriedHost(host, combined.summary))
        found = (rows, out, host)
        if failure_rate(rows).failures:
            break
    assert found is not None  # the host as it is is always tried
    rows, out, host = found
    if not failure_rate(rows).failures:  # nowhere: the host as it is speaks for the rows
        host = None
    step.result = result = _reproduce_result(ctx, rows, out, host, tried)
    step.runs.append(ctx.rel(out) or "")
    step.status = StepStatus.DONE
    step.headline = _reproduce_headline(result)
    return step


def _no_time(ctx: Context) -> str:
    return f"{max(0.0, ctx.left()):.0f} s left"


def hazards_seen(rows: Sequence[RunRow]) -> list[HazardSeen]:
    """The hazards the runs recorded (--hazards), once each, most often seen first: what a
    triage that cannot reproduce the failure still has to say (and bisects)."""
    seen: dict[tuple[str, str], HazardSeen] = {}
    for row in rows:
        try:
            found = load_report(Path(row.report_dir)).hazards if row.report_dir else None
        except HarnessError:  # a damaged or missing report: its hazards are unknown
            continue
        for h in found.hazards if found is not None else []:
            key = (h.kind.value, h.where)
            first = HazardSeen(h.kind.value, h.where, h.trigger or h.location, h.line(), 0)
            before = seen.get(key, first)
            seen[key] = replace(before, runs=before.runs + 1)
    return sorted(seen.values(), key=lambda h: -h.runs)


def _reproduce_result(
    ctx: Context, rows: list[RunRow], out: Path, host: str | None, tried: list[TriedHost]
) -> ReproduceResult:
    row = combine(rows, {}, compare_baseline(), out)
    rate = failure_rate(rows)
    found = groups(rows)
    return ReproduceResult(
        variant=compare_baseline(),
        host=host,
        runs=sum(r.runs for r in rows),
        counts=dict(row.kinds),
        failures=rate.failures,
        ran=rate.runs,
        failure_rate=rate.value,
        failure_rate_ci95=rate.ci95,
        summary=row.summary,
        kind=row.kind,
        mechanism=row.mechanism,
        location=row.location,
        cause=row.cause,
        folder=ctx.rel(out),
        first_failure=ctx.rel(found[0].first_run) if found else None,
        tried_hosts=tuple(tried),
        hazards=tuple(hazards_seen(rows)) if ctx.opts.run.hazards else (),
        # what the budget reads on --resume (one run's whole time, the builds' state)
        run_s=round(ctx.costs.run_s, 2),
        build_s=round(ctx.costs.build_s, 2),
        cache_warm=ctx.costs.cache_warm,
    )


def _reproduce_headline(r: ReproduceResult) -> str:
    where = f" in {r.location}" if r.location else ""
    why = f" ({r.cause})" if r.cause else ""
    host = f" under --host {r.host}" if r.host else ""
    if not r.first_failure:
        seen = f"; hazards seen: {len(r.hazards)}: {r.hazards[0].summary}" if r.hazards else ""
        return f"not reproduced{host}: {r.summary}{seen}"
    failed = round((r.failure_rate or 0.0) * ran_of(r))
    return f"{r.kind} {failed}/{ran_of(r)}{where}{why}{host}"


def ran_of(r: ReproduceResult) -> int:
    not_ran = {Kind.ERROR, Kind.INTERRUPTED, Kind.BUILD_FAILED}
    return sum(n for k, n in r.counts.items() if k not in not_ran)
