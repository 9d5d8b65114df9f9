"""PufferLib 3.0.0's final evaluation stuck (a real trigger): a spin, located by py-spy."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.vocab import Mechanism, Trigger
from tests.harness_cli import exit_pid, harness, samples_of, tree_is_gone, verdict_of
from tests.pufferlib3 import MARKS, PIN, SMALL, STALL, build

pytestmark = MARKS


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> None:
    build(tmp_path_factory)


def test_stuck_final_evaluation_is_a_spin_located_by_py_spy(tmp_path: Path, built: None) -> None:
    # a real trigger: with frameskip 0 no episode ever ends, so the evaluation loop after
    # training (it waits for episode stats) never exits; the trainer spins, silent, for the
    # whole stall window (most of this test's CPU: it is short because a SMALL epoch is).
    # Five epochs of training first, each a dashboard frame, so the silence comes after
    # progress, as it does in a real run
    res = harness(
        "run",
        "breakout",
        *PIN,
        *SMALL,
        "--steps",
        "20000",
        "--arg=--env.frameskip=0",
        "--stall",
        STALL,
        "--timeout",
        "180",
        report_root=tmp_path,
        env={"OMP_NUM_THREADS": "1"},  # one thread: the trainer would take both cores
        timeout=300,
    )
    report = res.loaded
    v = verdict_of(report)
    assert res.code == 2, v
    assert (v.kind, v.mechanism, v.location) == (Kind.HANG, Mechanism.SPIN, "evaluate")
    assert report.trigger is Trigger.STALL
    assert any("py-spy" in line for line in v.evidence)
    assert samples_of(report).tools["py-spy"] == "used"
    assert tree_is_gone(exit_pid(report))
