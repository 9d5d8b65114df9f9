"""Say why: each cause on its real test case, and no cause where it does not apply (a pass,
a crash, the other hang shapes). Every case is a real program under a real harness."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.causes import diagnose, load_rules, rule_from_table
from harness.analysis.detectors import Facts
from harness.errors import HarnessError
from tests.harness_cli import ROOT, harness

PROGRAMS = ROOT / "tests" / "programs"
FAST = ["--startup", "4", "--stall", "4", "--quiescent", "2", "--timeout", "60"]


def watch(tmp_path: Path, *cmd: str) -> dict[str, Any]:
    res = harness("watch", *FAST, "--", *cmd, report_root=tmp_path / "reports")
    return res.report


def causes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["verdict"]["causes"]}


@pytest.mark.slow
def test_lock_cycle_of_two(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    report = watch(tmp_path, str(c_program("mutex_deadlock")))
    found = causes(report)
    assert set(found) == {"lock-cycle"}, found
    sentence = found["lock-cycle"]["sentence"]
    tids = {t["tid"] for p in report["samples"]["snapshots"][-1]["processes"] for t in p["threads"]}
    named = {int(t) for t in re.findall(r"tid (\d+)", sentence)}
    assert len(named) == 2 and named <= tids, sentence
    assert "xfer_a_to_b" in sentence and "xfer_b_to_a" in sentence


@pytest.mark.slow
def test_lock_cycle_of_three(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    found = causes(watch(tmp_path, str(c_program("mutex_cycle3"))))
    assert set(found) == {"lock-cycle"}, found
    sentence = found["lock-cycle"]["sentence"]
    assert sentence.count("waits for mutex") == 3
    for name in ("cycle_t1", "cycle_t2", "cycle_t3"):
        assert name in sentence


@pytest.mark.slow
def test_python_locks_owner_unknown(tmp_path: Path) -> None:
    found = causes(watch(tmp_path, sys.executable, str(PROGRAMS / "py_deadlock.py")))
    assert set(found) == {"python-locks"}, found
    sentence = found["python-locks"]["sentence"]
    assert "xfer_a_to_b" in sentence and "xfer_b_to_a" in sentence and "owner unknown" in sentence


@pytest.mark.slow
def test_dead_worker_named_with_its_signal(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    report = watch(tmp_path, str(c_program("dead_worker")))
    v = report["verdict"]
    found = causes(report)
    assert set(found) == {"dead-worker"}, found
    sentence = found["dead-worker"]["sentence"]
    exits = [e for e in report["samples"]["events"] if e["event"] == "exit"]
    assert len(exits) == 1 and exits[0]["status"] == "killed by SIGKILL"
    assert f"worker pid {exits[0]['pid']}" in sentence and "died by SIGKILL" in sentence
    assert f"parent pid {exits[0]['ppid']} waits" in sentence and "read" in sentence
    # the location is the waiting parent's own frame (the worker is gone: nothing else waits)
    assert v["location"] == "wait_for_answer"


@pytest.mark.slow
def test_exit_blocked_names_the_threads(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    found = causes(watch(tmp_path, str(c_program("exit_blocked"))))
    assert set(found) == {"exit-blocked"}, found
    assert "shutdown_wait" in found["exit-blocked"]["sentence"]
    assert "wait_for_shutdown" in found["exit-blocked"]["sentence"]
    found = causes(watch(tmp_path / "py", sys.executable, str(PROGRAMS / "exit_blocked.py")))
    assert set(found) == {"exit-blocked"}, found
    assert "wait_for_shutdown (exit_blocked.py" in found["exit-blocked"]["sentence"]


@pytest.mark.slow
def test_spin_on_blocked_workers(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    report = watch(tmp_path, str(c_program("spin_on_workers")))
    assert report["verdict"]["mechanism"] == "spin"
    found = causes(report)
    assert set(found) == {"spin-on-blocked-workers"}, found
    sentence = found["spin-on-blocked-workers"]["sentence"]
    assert "wait_for_workers" in sentence and "3 thread(s)" in sentence


@pytest.mark.slow
@pytest.mark.parametrize("program", ["busy_spin", "segv"])
def test_no_cause_for_other_shapes(
    tmp_path: Path, c_program: Callable[[str], Path], program: str
) -> None:
    """A spin with no blocked workers, a crash: no cause is claimed."""
    report = watch(tmp_path, str(c_program(program)))
    assert report["verdict"]["kind"] in ("hang", "crash")
    assert report["verdict"]["causes"] == []


def test_no_cause_for_a_pass(tmp_path: Path) -> None:
    report = watch(tmp_path, sys.executable, "-c", "print('done')")
    assert report["verdict"]["kind"] == "pass" and report["verdict"]["causes"] == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_openmp_after_fork_on_the_stock_replica(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: None
) -> None:
    res = harness("run", "breakout", "--timeout", "60", report_root=tmp_path, env=cache_env)
    report = res.report
    assert report["verdict"]["location"] == "env_start"
    found = causes(report)
    assert list(found) == ["openmp-after-fork"], found
    cause = found["openmp-after-fork"]
    assert "forked without exec" in cause["sentence"] and "libgomp" in cause["sentence"]
    assert "harness compare breakout --variants stock,omp-free,fixed" in cause["remedies"][0]
    assert "waits for child pid" in report["verdict"]["waits_for"]
    assert report["verdict"]["waits_for"].endswith("which is blocked in env_start")
    # the summary puts the top cause on its own line and points at the command to try
    assert "openmp-after-fork (high)" in res.stdout
    assert "next:" in res.stdout and "harness compare breakout" in res.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_missing_dashboard_key_on_the_bare_replica(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    argv = ["run", "breakout", "--env", "REPLICA_CONTEXT=bare", "--timeout", "60"]
    report = harness(*argv, report_root=tmp_path, env=cache_env).report
    assert report["verdict"]["kind"] == "error-exit"
    found = causes(report)
    assert list(found) == ["missing-dashboard-key"], found
    assert "util/gpu_percent" in found["missing-dashboard-key"]["sentence"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_cause_for_the_fixed_replica(tmp_path: Path, cache_env: dict[str, str]) -> None:
    argv = ["run", "breakout", "--variant", "fixed", "--steps", "262144"]
    report = harness(*argv, report_root=tmp_path, env=cache_env).report
    assert report["verdict"]["kind"] == "pass" and report["verdict"]["causes"] == []


def test_a_pin_adds_a_cause_as_data() -> None:
    own = [
        {
            "id": "my-known-bug",
            "detector": "output",
            "kinds": ["error-exit"],
            "params": {"regex": r"CUDA error: (?P<what>.+)"},
            "sentence": "the CUDA runtime failed: {what}",
            "confidence": "high",
            "remedies": ["try {compare}"],
        }
    ]
    facts = Facts("error-exit", None, None, None, ["x", "CUDA error: out of memory"], "breakout")
    [cause] = diagnose(facts, load_rules(own))
    assert cause.id == "my-known-bug" and cause.sentence.endswith("out of memory")
    assert cause.remedies == ["try harness compare breakout --variants stock,omp-free"]
    with pytest.raises(HarnessError) as info:
        rule_from_table({**own[0], "detector": "magic"}, "pin")
    assert "unknown detector 'magic'" in info.value.message


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_active_wait_policy_spins_in_the_pool_but_is_located_in_env_start(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: None
) -> None:
    """OMP_WAIT_POLICY=active: the parent's idle OpenMP pool spins (a core busy in libgomp,
    no code of the program) while the forked child's team waits in futexes; the verdict is a
    spin, located where the program is stuck, with the same cause."""
    argv = ["run", "breakout", "--env", "OMP_WAIT_POLICY=active", "--startup", "8"]
    report = harness(*argv, "--timeout", "60", report_root=tmp_path, env=cache_env).report
    v = report["verdict"]
    assert (v["mechanism"], v["location"]) == ("spin", "env_start"), v["summary"]
    assert list(causes(report)) == ["openmp-after-fork"]
