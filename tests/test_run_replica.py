"""`harness run` on the embedded replica: the reported hang for real, the missing-key exit,
the fixed build passing, interruption, and bad input. Real builds, real processes."""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests.harness_cli import harness, tree_is_gone

pytestmark = [pytest.mark.timeout(240), pytest.mark.spread]
# the stock replica hangs for real only where gcc's OpenMP is GNU libgomp (its fork hazard)
stock_hang = pytest.mark.usefixtures("libgomp_fork_hazard")


@pytest.mark.slow
@stock_hang
def test_stock_replica_hangs_in_env_start(tmp_path: Path, cache_env: dict[str, str]) -> None:
    # quiescence off: this is the startup window's test (tests/test_quiescence.py has the
    # early verdict on the same hang)
    argv = ["run", "breakout", "--timeout", "60", "--startup", "8", "--quiescent", "0"]
    res = harness(*argv, report_root=tmp_path, env=cache_env)
    report = res.report
    v = report["verdict"]
    assert res.code == 2, res.stdout + res.stderr
    assert (v["kind"], v["location"]) == ("hang", "env_start")
    assert v["mechanism"] == "deadlock"  # every thread blocked, as README.md shows
    assert any("libgomp" in r for r in v["runtime"]), v["runtime"]
    assert report["trigger"] == "startup"
    assert report["timings"]["run_s"] < 8 + 5  # at the startup window, not the wall timeout
    assert tree_is_gone(report["exit"]["pid"])
    assert report["cleanup"]["leftover"] == []
    assert "env_start" in (res.folder / "stacks.txt").read_text()
    assert (res.folder / "junit.xml").read_text().count("<failure") == 1


@pytest.mark.slow
def test_stock_replica_bare_exits_on_missing_gpu_key(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = harness(
        "run",
        "breakout",
        "--env",
        "REPLICA_CONTEXT=bare",
        "--timeout",
        "60",
        report_root=tmp_path,
        env=cache_env,
    )
    v = res.report["verdict"]
    assert res.code == 3
    assert v["kind"] == "error-exit"
    assert "missing key [?] util/gpu_percent" in v["summary"]


@pytest.mark.slow
def test_fixed_replica_passes_over_a_million_steps(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = harness(
        "run",
        "breakout",
        "--variant",
        "fixed",
        "--timeout",
        "60",
        report_root=tmp_path,
        env=cache_env,
    )
    report = res.report
    assert res.code == 0, report["verdict"]
    assert report["verdict"]["kind"] == "pass"
    assert report["progress"]["last_metrics"]["agent_steps"] >= 1_000_000
    assert report["checks"], "the scenario's checks ran"
    assert all(c["status"] == "pass" for c in report["checks"]), report["checks"]
    assert any("env_start" in c for c in report["variant"]["changes"])
    assert any("vec_thread_main" in c for c in report["variant"]["changes"])


@pytest.mark.slow
@stock_hang
def test_interrupting_a_run_leaves_a_partial_report(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    harness("build", "breakout", report_root=tmp_path, env=cache_env)  # so the signal lands mid-run
    res = harness(
        "run",
        "breakout",
        "--startup",
        "60",
        "--timeout",
        "90",
        report_root=tmp_path,
        env=cache_env,
        interrupt=signal.SIGTERM,
        # mid-run, as the test means it: the trainer has forked the child that hangs
        interrupt_when=lambda trainer: bool(trainer.children()),
    )
    report = res.report
    assert res.code == 143
    assert report["status"] == "interrupted"
    assert report["stage"] == "done"
    assert tree_is_gone(report["exit"]["pid"])


def test_unknown_env_and_malformed_scenario(tmp_path: Path) -> None:
    res = harness("run", "nosuchenv", report_root=tmp_path)
    assert res.code == 5
    assert res.stderr.startswith("harness: error: unknown env or scenario 'nosuchenv'")
    assert len(res.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("schema_version = 1\nenv = [\n")
    res = harness("run", "breakout", "--scenario", str(bad), report_root=tmp_path)
    assert res.code == 5 and "malformed TOML" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
@stock_hang
def test_missing_eu_stack_falls_back_to_gdb(tmp_path: Path, cache_env: dict[str, str]) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "gcc", "gdb", "git", "as", "ld", "cat", "dirname", "uname"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {**cache_env, "PATH": f"{bare}:{Path(sys.executable).parent}"}
    res = harness(
        "run", "breakout", "--startup", "6", "--timeout", "60", report_root=tmp_path / "r", env=env
    )
    report = res.report
    assert res.code == 2, res.stderr
    assert report["samples"]["tools"]["eu-stack"] == "missing"
    assert report["samples"]["tools"]["gdb"] == "used"
    assert report["verdict"]["location"] == "env_start"
