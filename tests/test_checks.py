"""Scenario checks (issue 4): the engine on known values, recorded real output, and real
replica runs with its fault flags."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from harness import dashboard
from harness.analysis import checks
from harness.config.scenario import load_scenario
from harness.outcome import Kind
from harness.vocab import CheckStatus
from tests.harness_cli import harness, run_replica, verdict_of

DATA = Path(__file__).resolve().parent / "data"


def frame(**metrics: float) -> dashboard.MetricsFrame:
    return dashboard.MetricsFrame(0, dict(metrics), {}, 0)


def test_range_reports_the_value_and_the_bound() -> None:
    obs = checks.observe([frame(**{"env/perf": 0.5}), frame(**{"env/perf": 1.5})])
    [res] = checks.evaluate([{"kind": "range", "key": "env/perf", "min": 0, "max": 1}], obs, "p")
    assert (res.status, res.observed, res.bound) == ("fail", "[0.5, 1.5]", "[0, 1]")
    assert res.message == "env/perf = 1.5 outside [0, 1] (1 of 2 values)"


def test_required_globs_finite_and_pins_filter() -> None:
    obs = checks.observe([frame(**{"loss/policy": 0.1, "loss/value": math.nan})])
    specs: list[dict[str, Any]] = [
        {"kind": "required", "keys": ["loss/*", "env/*"]},
        {"kind": "finite", "keys": ["loss/*"]},
        {"kind": "range", "key": "SPS", "min": 1, "pins": ["other"]},
    ]
    got = {r.name: r.status for r in checks.evaluate(specs, obs, "mine")}
    assert got == {
        "key loss/* reported": "pass",
        "key env/* reported": "fail",
        "loss/* finite": "fail",
    }


def test_steps_reached_counts_whole_epochs() -> None:
    config = {"vec": {"total_agents": "4096"}, "train": {"horizon": "64"}}
    obs = checks.observe([frame(agent_steps=786432)], None, config, 1_000_000)
    spec = {"kind": "steps_reached", "per_epoch": ["vec.total_agents", "train.horizon"]}
    [res] = checks.evaluate([spec], obs, "p")
    assert res.status == "pass" and "3 epochs of 262144" in res.bound
    obs = checks.observe([frame(agent_steps=524288)], None, config, 1_000_000)
    assert checks.evaluate([spec], obs, "p")[0].status == "fail"


def test_recorded_replica_output_passes_its_scenario() -> None:
    for env in ("breakout", "cartpole"):
        text = (DATA / f"replica_{env}_fixed.txt").read_text()
        frames = [f for f in dashboard.parse_text("puffer5", text) if f.complete]
        assert len(frames) >= 3
        obs = checks.observe(
            frames,
            None,
            {"train": {"clip_coef": "0.2", "vf_clip_coef": "1", "max_grad_norm": "1.5"}},
        )
        results = checks.evaluate(load_scenario(env).checks, obs, "replica")
        assert len(results) > 20, env  # the scenario's checks ran, not an empty list
        # every check passes; the one about the requested steps has no request to compare to
        not_passed = {r.name: r.status for r in results if r.status != "pass"}
        assert not_passed == {"agent_steps reached the requested steps": "skip"}, env


def test_recorded_pufferlib3_output_passes_its_scenario() -> None:
    text = (DATA / "puffer3_breakout_cpu.txt").read_text()
    frames = [f for f in dashboard.parse_text("puffer3", text) if f.complete]
    assert len(frames) == 64
    assert frames[10].metrics["epoch"] == 10 and "env/score" in frames[10].metrics
    obs = checks.observe(
        frames, None, {"train": {"clip_coef": "0.2", "vf_clip_coef": "0.2", "max_grad_norm": "1.5"}}
    )
    results = checks.evaluate(load_scenario("breakout").checks, obs, "pufferlib-3.0.0")
    assert len(results) > 15 and {r.status for r in results} == {"pass"}, results
    assert 40_000 < dashboard.measured_sps(frames) < 90_000  # type: ignore[operator]


def test_check_command_on_a_saved_log(tmp_path: Path) -> None:
    res = harness(
        "check",
        str(DATA / "replica_breakout_fixed.txt"),
        "--scenario",
        "breakout",
        report_root=tmp_path,
    )
    assert res.code == 0, res.stdout
    assert res.stdout.strip().endswith("checks passed")


FIXED_TWO_EPOCHS = ("--variant", "fixed", "--steps", "524288")


@pytest.mark.slow
@pytest.mark.timeout(300)
class TestReplicaRuns:
    def test_too_few_steps_stock_exits_on_uptime(
        self, tmp_path: Path, cache_env: dict[str, str]
    ) -> None:
        res = run_replica(tmp_path, cache_env, "--steps", "50000", "--env", "REPLICA_CONTEXT=bare")
        v = verdict_of(res.loaded)
        assert (res.code, v.kind) == (3, Kind.ERROR_EXIT)
        assert "missing key [?] uptime" in v.summary

    def test_too_few_steps_fixed_fails_epochs(
        self, tmp_path: Path, cache_env: dict[str, str]
    ) -> None:
        res = run_replica(tmp_path, cache_env, "--variant", "fixed", "--steps", "50000")
        v = verdict_of(res.loaded)
        assert (res.code, v.kind) == (1, Kind.CHECK_FAILED)
        assert v.summary.startswith("check failed: epochs >= 1")

    def test_out_of_bounds_reward_names_key_value_and_bound(
        self, tmp_path: Path, cache_env: dict[str, str]
    ) -> None:
        fault = "REPLICA_FAULT=reward_oob"
        res = run_replica(tmp_path, cache_env, *FIXED_TWO_EPOCHS, "--env", fault)
        assert res.code == 1
        checks = res.loaded.checks
        failed = {c.name: c for c in checks if c.status is CheckStatus.FAIL}
        perf = failed["env/perf in [0, 1]"]
        assert perf.bound == "[0, 1]" and "env/perf = 1.5" in perf.message
        assert "env/score in [0, 864]" in failed

    def test_dropped_key_and_nan_loss(self, tmp_path: Path, cache_env: dict[str, str]) -> None:
        fault = "REPLICA_FAULT=drop_key:env/score,nan_loss"
        res = run_replica(tmp_path, cache_env, *FIXED_TWO_EPOCHS, "--env", fault)
        assert res.code == 1
        failed = {c.name for c in res.loaded.checks if c.status is CheckStatus.FAIL}
        assert "key env/score reported" in failed
        assert "losses finite" in failed
