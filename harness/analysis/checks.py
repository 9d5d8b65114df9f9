"""Scenario checks on what a run reported: dashboard keys present, per-key bounds over every
frame, finiteness, epochs trained, steps reached, SPS floor, and clipping settings read from
the resolved config. Checks are data (the scenario's [[checks]], docs/scenario-schema.md);
each yields one CheckResult with the observed value and the bound. ``run_checks`` evaluates a
finished run: its dashboard frames, and its end-of-run log (``endlogs``) for final metrics and
the resolved config.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import contain, dashboard, outcome
from harness.analysis import endlogs
from harness.vocab import CheckKind, CheckOver, CheckStatus


@dataclass
class CheckResult:
    name: str
    status: CheckStatus
    observed: object = None
    bound: str = ""
    message: str = ""


@dataclass(frozen=True)
class CheckInputs:
    """What run_checks looks at: a run's frames and where to find its config and logs."""

    checks: Sequence[Mapping[str, Any]]  # the scenario's [[checks]] specs
    pin: str | tuple[str, ...]  # the pin's name or lineage: `pins` names any of them
    frames: Sequence[dashboard.MetricsFrame]  # the run's complete frames, in order
    tree: Path  # the build tree, whose config files are read when the run left no log
    run_dir: Path  # the trainer's working dir: end-of-run logs are under logs/<env>/
    env: str  # the env's name for this pin
    argv: Sequence[str]  # the trainer's command line (its --sec.key=value flags)
    config_files: Sequence[str]  # paths in the tree, "{env}" standing for the env's name
    started_at: float  # wall-clock epoch seconds: logs written before are an older run's
    steps: int | None  # the requested agent steps, None when none were


@dataclass
class Observed:
    """Everything a check may look at."""

    series: dict[str, list[float]]  # key → values in frame order (end-of-run metrics last)
    frames: int
    config: dict[str, dict[str, str]]  # section → key → value (resolved)
    requested_steps: int | None

    def keys(self, pattern: str) -> list[str]:
        return sorted(k for k in self.series if fnmatch.fnmatchcase(k, pattern))


def observe(
    frames: Sequence[dashboard.MetricsFrame],
    final_metrics: Mapping[str, float] | None = None,
    config: dict[str, dict[str, str]] | None = None,
    requested_steps: int | None = None,
) -> Observed:
    series: dict[str, list[float]] = {}
    for frame in frames:
        for key, value in frame.metrics.items():
            series.setdefault(key, []).append(value)
    for key, value in (final_metrics or {}).items():
        series.setdefault(key, []).append(value)
    return Observed(series, len(frames), config or {}, requested_steps)


def _fmt(x: float) -> str:
    return f"{x:g}"


def _bound(spec: Mapping[str, Any]) -> str:
    lo, hi = spec.get("min"), spec.get("max")
    if lo is not None and hi is not None:
        return f"[{_fmt(lo)}, {_fmt(hi)}]"
    if lo is not None:
        return f">= {_fmt(lo)}"
    if hi is not None:
        return f"<= {_fmt(hi)}"
    return "any"


def _within(value: float, spec: Mapping[str, Any]) -> bool:
    lo, hi = spec.get("min"), spec.get("max")
    if math.isnan(value):
        return False
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _check_required(spec: Mapping[str, Any], obs: Observed) -> list[CheckResult]:
    out = []
    for pattern in spec["keys"]:
        found = obs.keys(pattern)
        name = f"key {pattern} reported"
        if found:
            out.append(CheckResult(name, CheckStatus.PASS, ", ".join(found[:5]), "present"))
        else:
            why = "no dashboard frame was rendered" if obs.frames == 0 else "never in any frame"
            out.append(
                CheckResult(name, CheckStatus.FAIL, "missing", "present", f"{pattern}: {why}")
            )
    return out


def _check_range(spec: Mapping[str, Any], obs: Observed) -> list[CheckResult]:
    out = []
    over = CheckOver(spec.get("over", CheckOver.ALL))
    for key in [spec["key"]] if "key" in spec else spec["keys"]:
        name = spec.get("name") or f"{key} in {_bound(spec)}"
        matched = obs.keys(key)
        if not matched:
            status = CheckStatus.SKIP if spec.get("optional") else CheckStatus.FAIL
            why = "no dashboard frame was rendered" if obs.frames == 0 else "not reported"
            out.append(CheckResult(name, status, None, _bound(spec), f"{key}: {why}"))
            continue
        for k in matched:
            values = obs.series[k][-1:] if over is CheckOver.LAST else obs.series[k]
            bad = [v for v in values if not _within(v, spec)]
            lo, hi = min(values), max(values)
            observed: object = (
                _fmt(values[-1]) if over is CheckOver.LAST else f"[{_fmt(lo)}, {_fmt(hi)}]"
            )
            label = name if k == key else f"{k} in {_bound(spec)}"
            if bad:
                msg = (
                    f"{k} = {_fmt(bad[0])} outside {_bound(spec)} "
                    f"({len(bad)} of {len(values)} values)"
                )
                out.append(CheckResult(label, CheckStatus.FAIL, observed, _bound(spec), msg))
            else:
                out.append(CheckResult(label, CheckStatus.PASS, observed, _bound(spec)))
    return out


def _check_finite(spec: Mapping[str, Any], obs: Observed) -> list[CheckResult]:
    out = []
    for pattern in spec["keys"]:
        keys = obs.keys(pattern)
        name = spec.get("name") or f"{pattern} finite"
        if not keys:
            status = CheckStatus.SKIP if spec.get("optional") else CheckStatus.FAIL
            out.append(CheckResult(name, status, None, "finite", f"{pattern}: not reported"))
            continue
        bad = [(k, v) for k in keys for v in obs.series[k] if not math.isfinite(v)]
        if bad:
            k, v = bad[0]
            out.append(CheckResult(name, CheckStatus.FAIL, f"{k} = {v}", "finite", f"{k} is {v}"))
        else:
            out.append(CheckResult(name, CheckStatus.PASS, f"{len(keys)} keys", "finite"))
    return out


def _check_config(spec: Mapping[str, Any], obs: Observed) -> list[CheckResult]:
    section, key = spec["section"], spec["key"]
    name = spec.get("name") or f"config [{section}] {key} in {_bound(spec)}"
    if not obs.config:
        return [CheckResult(name, CheckStatus.SKIP, None, _bound(spec), "no config available")]
    raw = obs.config.get(section, {}).get(key)
    if raw is None:
        status = CheckStatus.SKIP if spec.get("optional") else CheckStatus.FAIL
        return [
            CheckResult(
                name, status, None, _bound(spec), f"[{section}] {key} not in the resolved config"
            )
        ]
    try:
        value = float(raw)
    except ValueError:
        return [
            CheckResult(
                name,
                CheckStatus.FAIL,
                raw,
                _bound(spec),
                f"[{section}] {key} = {raw!r} is not a number",
            )
        ]
    ok = _within(value, spec)
    msg = "" if ok else f"[{section}] {key} = {_fmt(value)} outside {_bound(spec)}"
    return [
        CheckResult(
            name, CheckStatus.PASS if ok else CheckStatus.FAIL, _fmt(value), _bound(spec), msg
        )
    ]


def _check_steps(spec: Mapping[str, Any], obs: Observed) -> list[CheckResult]:
    key = spec.get("key", "agent_steps")
    fraction = float(spec.get("fraction", 1.0))
    name = spec.get("name") or f"{key} reached the requested steps"
    if obs.requested_steps is None:
        return [CheckResult(name, CheckStatus.SKIP, None, "", "no step count was requested")]
    need = obs.requested_steps * fraction
    per_epoch = epoch_size(spec.get("per_epoch", ()), obs.config)
    if per_epoch:  # trainers run whole epochs: requested // epoch_size of them
        need = (obs.requested_steps // per_epoch) * per_epoch * fraction
    bound = f">= {_fmt(need)}" + (
        f" ({_fmt(need / per_epoch)} epochs of {per_epoch})" if per_epoch else ""
    )
    values = obs.series.get(key)
    if not values:
        return [CheckResult(name, CheckStatus.FAIL, None, bound, f"{key} never reported")]
    got = max(values)
    ok = got >= need
    return [
        CheckResult(
            name,
            CheckStatus.PASS if ok else CheckStatus.FAIL,
            _fmt(got),
            bound,
            "" if ok else f"{key} reached {_fmt(got)} of {_fmt(need)} requested",
        )
    ]


def epoch_size(factors: Sequence[str], config: Mapping[str, Mapping[str, str]]) -> int:
    """Steps per epoch as the product of config values named "section.key" (0: unknown)."""
    size = 1
    for name in factors:
        section, _, key = name.partition(".")
        try:
            size *= int(float(config.get(section, {}).get(key, "")))
        except ValueError:
            return 0
    return size if factors else 0


# one checker per check kind
CHECKERS = {
    CheckKind.REQUIRED: _check_required,
    CheckKind.RANGE: _check_range,
    CheckKind.FINITE: _check_finite,
    CheckKind.CONFIG: _check_config,
    CheckKind.STEPS_REACHED: _check_steps,
}


def evaluate(
    specs: Iterable[Mapping[str, Any]], obs: Observed, pin: str | Sequence[str]
) -> list[CheckResult]:
    """Every check that applies to the pin: one without `pins`, or one naming the pin or a
    pin it extends (`pin` may be the lineage: the pin's name, then its ancestors')."""
    lineage = (pin,) if isinstance(pin, str) else tuple(pin)
    results: list[CheckResult] = []
    for spec in specs:
        pins = spec.get("pins")
        if pins is not None and not any(name in pins for name in lineage):
            continue
        results += CHECKERS[spec["kind"]](spec, obs)
    return results


# ---------------------------------------------------------------- resolved config

_FLAG = re.compile(r"^--(?P<section>[A-Za-z_][\w-]*)\.(?P<key>[\w-]+)=(?P<value>.*)$")


def config_for(
    log: Path | None, tree: Path, env: str, argv: Sequence[str], config_files: Sequence[str]
) -> tuple[dict[str, dict[str, str]], str]:
    if log is not None:
        return endlogs.log_config(log), str(log)
    config: dict[str, dict[str, str]] = {}
    for template in config_files:
        rel = template.format(env=env)
        # confined to the tree: an absolute or '..' entry, or a config file that is a link
        # out of the tree, is refused (one line naming the entry), never read; a file that
        # is not regular (a FIFO) is read as missing, not waited on
        what = f"config_files entry {template!r}"
        problem = contain.lexical_problem(rel)
        if problem is not None:
            raise contain.refuse(what, rel, problem)
        if not tree.is_dir():  # a saved log checked without its tree: nothing to read
            continue
        path = contain.confined(tree, rel, what=what)
        if path.is_file():
            endlogs.read_ini(path, config)
    for arg in _joined_flags(argv):
        m = _FLAG.match(arg)
        if m:
            key = m["key"].replace("-", "_")
            config.setdefault(m["section"], {})[key] = m["value"]
    return config, "config files + command-line flags"


def _joined_flags(argv: Sequence[str]) -> list[str]:
    """`--sec.key value` (3.0's argparse form) joined into `--sec.key=value`."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg, nxt = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        dotted = arg.startswith("--") and "." in arg and "=" not in arg
        if dotted and nxt is not None and not nxt.startswith("--"):
            out.append(f"{arg}={nxt}")
            i += 2
        else:
            out.append(arg)
            i += 1
    return out


def run_checks(inputs: CheckInputs) -> tuple[list[CheckResult], str]:
    """The results of the checks on a run, and where its config was read from."""
    # an older run's record is not this run's
    log = endlogs.newest_log(inputs.run_dir, inputs.env, inputs.started_at)
    final = endlogs.log_metrics(log) if log is not None else {}
    config, source = config_for(log, inputs.tree, inputs.env, inputs.argv, inputs.config_files)
    obs = observe(inputs.frames, final, config, inputs.steps)
    return evaluate(inputs.checks, obs, inputs.pin), source


def apply_to_verdict(verdict: Any, results: Sequence[CheckResult]) -> None:
    """A run that passed but failed a check becomes check-failed (exit 1); other verdicts
    (hang, crash, …) stay what they are: their checks are context, not the cause."""
    failed = [r for r in results if r.status is CheckStatus.FAIL]
    if verdict.kind != outcome.Kind.PASS or not failed:
        return
    verdict.become(outcome.Kind.CHECK_FAILED)
    first = failed[0]
    why = (
        f" ({first.message})"
        if first.message
        else f": observed {first.observed}, bound {first.bound}"
    )
    verdict.summary = f"check failed: {first.name}{why}" + (
        f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    )
    verdict.evidence = [
        f"check {r.name}: observed {r.observed}, bound {r.bound}: {r.message}" for r in failed
    ] + verdict.evidence
