"""The reward probe on the replica's real env headers."""

from __future__ import annotations

import pytest

from harness.analysis import probe
from harness.errors import HarnessError
from harness.pipeline.probe import probe_env

pytestmark = pytest.mark.timeout(120)


def test_breakout_raw_rewards_exceed_one_and_clamped_stay_inside() -> None:
    res = probe_env("breakout", "replica", "stock", None, 5000, 32, 3)
    assert res.data["raw_max"] > 1  # several bricks in one 4-frame step
    assert res.data["above_one"] > 0
    assert -1 <= res.data["clamped_min"] <= res.data["clamped_max"] <= 1
    assert res.data["raw_max"] <= res.data["declared_max"] == 28
    assert res.ok, [c for c in res.checks if c.status == "fail"]


def test_cartpole_rewards_are_zero_or_one_and_episodes_capped() -> None:
    res = probe_env("cartpole", "replica", "stock", None, 5000, 16, 3)
    assert (res.data["raw_min"], res.data["raw_max"]) == (0, 1)
    assert res.data["log"]["episode_length"] <= 200
    assert res.ok


def test_out_of_bounds_probe_output_fails_the_named_check() -> None:
    data = {
        "raw_min": 0.0,
        "raw_max": 30.0,
        "clamped_min": 0.0,
        "clamped_max": 1.0,
        "declared_min": 0.0,
        "declared_max": 28.0,
        "nonfinite": 0,
        "samples": 10,
        "episodes": 2,
        "log": {"perf": 1.5},
    }
    checks = probe.evaluate(data, {"raw_min": 0, "raw_max": 28, "log": {"perf": [0, 1]}})
    failed = {c.name: c for c in checks if c.status == "fail"}
    assert set(failed) == {
        "probe raw reward max",
        "probe raw reward max within the env's declared range",
        "probe log perf",
    }
    assert failed["probe log perf"].observed == "1.5"


def test_probe_needs_a_driver() -> None:
    with pytest.raises(HarnessError, match="no \\[probe\\] driver"):
        probe_env("breakout", "pufferlib-5.0", "stock", None, 10, 1, 1)
