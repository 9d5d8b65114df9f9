"""PufferLib 3.0.0, a real trainer we did not write, under the harness on CPU (issue 6).

The first run builds it from the PyPI sdist into the harness cache (~2-3 min); later runs
reuse that build (the cache is the user's, so CI on the same machine reuses it too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness_cli import harness, tree_is_gone

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(1800)]
PIN = ("--pin", "pufferlib-3.0.0")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    res = harness(
        "build", "puffer_breakout", *PIN, report_root=tmp_path_factory.mktemp("b"), timeout=1700
    )
    assert res.code == 0, res.stdout + res.stderr


def test_breakout_trains_on_cpu_and_passes_checks(tmp_path: Path, built: None) -> None:
    res = harness(
        "run",
        "breakout",
        *PIN,
        "--steps",
        "1100000",
        "--timeout",
        "240",
        report_root=tmp_path,
        timeout=300,
    )
    report = res.report
    assert res.code == 0, report["verdict"]
    assert report["progress"]["last_metrics"]["agent_steps"] >= 1_000_000
    assert report["progress"]["measured_sps"] > 5_000
    names = {c["name"]: c for c in report["checks"]}
    assert names["epochs >= 1"]["status"] == "pass"
    assert names["env/score in [0, 864]"]["status"] == "pass"
    assert names["config [train] clip_coef in [0.01, 1]"]["observed"] == "0.196968"
    assert all(c["status"] == "pass" for c in report["checks"])


def test_stuck_final_evaluation_is_a_spin_located_by_py_spy(tmp_path: Path, built: None) -> None:
    # a real trigger: with frameskip 0 no episode ever ends, so the evaluation loop after
    # training (it waits for episode stats) never exits; the trainer spins, silent
    res = harness(
        "run",
        "breakout",
        *PIN,
        "--steps",
        "100000",
        "--arg=--env.frameskip=0",
        "--stall",
        "20",
        "--timeout",
        "180",
        report_root=tmp_path,
        timeout=300,
    )
    report = res.report
    v = report["verdict"]
    assert res.code == 2, v
    assert (v["kind"], v["mechanism"], v["location"]) == ("hang", "spin", "evaluate")
    assert report["trigger"] == "stall"
    assert any("py-spy" in line for line in v["evidence"])
    assert report["samples"]["tools"]["py-spy"] == "used"
    assert tree_is_gone(report["exit"]["pid"])
