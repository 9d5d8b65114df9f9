"""`harness check`: a scenario's checks re-run on a saved report or output log, without the
trainer, evaluated exactly like a live run."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from harness import dashboard
from harness.analysis import checks as checksmod
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.options import CheckOptions


def check_saved(opts: CheckOptions) -> tuple[list[checksmod.CheckResult], str]:
    """Re-run a scenario's checks on a saved report or output log, without the trainer."""
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
    settings = scenario.settings(pin.lineage)
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
        checksmod.CheckInputs(
            checks=scenario.checks,
            pin=pin.lineage,
            frames=[f for f in parsed if f.complete],
            tree=tree,
            run_dir=run_dir,
            env=settings.upstream_env,
            argv=[str(a) for a in _list_of(command, "argv")],
            config_files=settings.config_files or pin.config_files,
            started_at=_epoch(saved.get("started_at")),
            steps=int(str(steps)) if steps else None,
        )
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
    try:
        return datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return float("inf")
