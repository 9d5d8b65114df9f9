"""PufferLib 3.0.0 trains breakout on CPU under the harness and passes its scenario's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness_cli import harness
from tests.pufferlib3 import MARKS, PIN, build

pytestmark = MARKS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    build(tmp_path_factory)


def test_breakout_trains_on_cpu_and_passes_checks(tmp_path: Path, built: None) -> None:
    # three epochs of 65,536 steps: a real training whose every check is evaluated, in a
    # fifth of the time of the 1.1M steps this test once ran
    res = harness(
        "run",
        "breakout",
        *PIN,
        "--steps",
        "200000",
        "--timeout",
        "240",
        report_root=tmp_path,
        timeout=300,
    )
    report = res.report
    assert res.code == 0, report["verdict"]
    assert report["progress"]["last_metrics"]["agent_steps"] >= 200_000
    # speed is measured in bench/bench_overhead.py, side by side with a bare run; here only
    # that the harness measured one (the test workers share the cores)
    assert report["progress"]["measured_sps"] > 0
    names = {c["name"]: c for c in report["checks"]}
    assert names["epochs >= 1"]["status"] == "pass"
    assert names["env/score in [0, 864]"]["status"] == "pass"
    assert names["config [train] clip_coef in [0.01, 1]"]["observed"] == "0.196968"
    assert all(c["status"] == "pass" for c in report["checks"])
