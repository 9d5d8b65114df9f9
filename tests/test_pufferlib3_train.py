"""PufferLib 3.0.0 trains breakout on CPU under the harness and passes its scenario's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.vocab import CheckStatus
from tests.harness_cli import harness
from tests.pufferlib3 import MARKS, PIN, SMALL, build

pytestmark = MARKS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    build(tmp_path_factory)


def test_breakout_trains_on_cpu_and_passes_checks(tmp_path: Path, built: None) -> None:
    # 100k steps of the SMALL trainer: 25 epochs of 4,096 steps, ~800 steps per agent, so
    # episodes (462 steps or more) finish during training too; then the trainer's final
    # evaluation (32 rollouts of a batch, 131k steps). About 18 CPU-s for the trainer here
    # (5 of them importing torch), where the pin's size (300k steps, then a 1M-step final
    # evaluation) took about 50. One OpenMP/torch thread: the trainer otherwise takes both
    # cores (tree CPU ~190%) and fights the other test workers for them
    res = harness(
        "run",
        "breakout",
        *PIN,
        *SMALL,
        "--steps",
        "100000",
        # the final evaluation prints nothing until it ends: a few seconds on an idle
        # machine, but the pin's 1M-step one ran past 120 s under a load average of 16 on 2
        # cores; the scenario's 45 s stall window is for an idle machine (45 s of silence is
        # a hang to the scenario, as it should be there)
        "--stall",
        "120",
        "--timeout",
        "300",
        report_root=tmp_path,
        env={"OMP_NUM_THREADS": "1"},
        timeout=360,
    )
    report = res.loaded
    # the scenario's SPS floor (>= 20,000) is a throughput check: it holds on an idle
    # machine (31,800 at this size, beside other work) and may fail while the other test
    # workers load both cores (14,800 was seen, and 2,700 at a load average of 16); every
    # other check must pass, and the SPS floor must have been evaluated
    failed = [c.name for c in report.checks if c.status is not CheckStatus.PASS]
    assert set(failed) <= {"SPS floor"}, report.checks
    assert res.code == (1 if failed else 0), report.verdict
    assert report.progress.last_metrics["agent_steps"] >= 100_000
    # speed is measured in bench/bench_overhead.py, side by side with a bare run; here only
    # that the harness measured one (the test workers share the cores)
    sps = report.progress.measured_sps
    assert sps is not None and sps > 0, sps
    names = {c.name: c for c in report.checks}
    assert names["epochs >= 1"].status is CheckStatus.PASS
    assert names["env/score in [0, 864]"].status is CheckStatus.PASS
    assert names["config [train] clip_coef in [0.01, 1]"].observed == "0.196968"
    assert names["SPS floor"].status in (CheckStatus.PASS, CheckStatus.FAIL)
