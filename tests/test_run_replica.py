"""`harness run` on the embedded replica: the reported hang for real, the missing-key exit,
the fixed build passing, interruption, and bad input. Real builds, real processes."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.vocab import CheckStatus, Mechanism, RunStatus, Stage, Trigger
from tests.harness_cli import harness, run_replica, tree_is_gone, verdict_of

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
    assert res.code == 2, res.stdout + res.stderr
    report = res.loaded
    v = verdict_of(report)
    assert (v.kind, v.location) == (Kind.HANG, "env_start")
    assert v.mechanism is Mechanism.DEADLOCK  # every thread blocked, as README.md shows
    assert any("libgomp" in r for r in v.runtime), v.runtime
    assert report.trigger is Trigger.STARTUP
    run_s = report.timings.run_s
    assert run_s is not None and run_s < 8 + 5  # at the startup window, not the wall timeout
    assert report.exit is not None and report.exit.pid is not None
    assert tree_is_gone(report.exit.pid)
    assert report.cleanup.leftover == []
    assert "env_start" in (res.folder / "stacks.txt").read_text()
    assert (res.folder / "junit.xml").read_text().count("<failure") == 1


@pytest.mark.slow
def test_stock_replica_bare_exits_on_missing_gpu_key(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = run_replica(tmp_path, cache_env, "--env", "REPLICA_CONTEXT=bare", "--timeout", "60")
    assert res.code == 3
    v = verdict_of(res.loaded)
    assert v.kind is Kind.ERROR_EXIT
    assert "missing key [?] util/gpu_percent" in v.summary


@pytest.mark.slow
def test_fixed_replica_passes_over_a_million_steps(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = run_replica(tmp_path, cache_env, "--variant", "fixed", "--timeout", "60")
    report = res.loaded
    assert res.code == 0, report.verdict
    assert verdict_of(report).kind is Kind.PASS
    assert report.progress.last_metrics["agent_steps"] >= 1_000_000
    assert report.checks, "the scenario's checks ran"
    assert all(c.status is CheckStatus.PASS for c in report.checks), report.checks
    assert report.variant is not None
    assert any("env_start" in c for c in report.variant.changes)
    assert any("vec_thread_main" in c for c in report.variant.changes)


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
    assert res.code == 143
    report = res.loaded
    assert report.status is RunStatus.INTERRUPTED
    assert report.stage is Stage.DONE
    assert report.exit is not None and report.exit.pid is not None
    assert tree_is_gone(report.exit.pid)


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
    assert res.code == 2, res.stderr
    report = res.loaded
    assert report.samples is not None
    assert report.samples.tools["eu-stack"] == "missing"
    assert report.samples.tools["gdb"] == "used"
    assert verdict_of(report).location == "env_start"


@pytest.mark.slow
def test_a_run_reads_its_own_end_of_run_log_not_the_trees(tmp_path: Path) -> None:
    """Runs of one cached build at once (--jobs, compare, a sweep, the suite's workers) all
    ran in the build tree, and a run's checks read the newest end-of-run log there: another
    run's, when that one ended in between (CI saw `agent_steps reached 1e+06 of 1.04858e+06
    requested` on a 4-epoch run). A run now works in a folder of its own in its report (the
    tree's entries linked, logs/ and checkpoints/ its own). Shown with a decoy: a newer log
    in the tree's logs/ that a run reading the tree would take (1 step trained)."""
    cache = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    first = harness("run", "breakout", "--variant", "fixed", report_root=tmp_path / "a", env=cache)
    assert first.code == 0, first.stderr
    build = first.loaded.build
    assert build is not None
    tree = build.tree
    decoy = tree / "logs" / "breakout" / "decoy.ini"
    decoy.parent.mkdir(parents=True, exist_ok=True)
    decoy.write_text("[metrics]\nagent_steps = 1\nepoch = 0\n")
    later = time.time() + 3600  # newer than anything the next run writes
    os.utime(decoy, (later, later))

    res = harness("run", "breakout", "--variant", "fixed", report_root=tmp_path / "b", env=cache)
    report = res.loaded
    assert res.code == 0, report.verdict
    assert report.progress.final_metrics["agent_steps"] == 4 * 262144
    assert report.command is not None and Path(report.command.cwd) == res.folder / "workdir"
    # what the trainer wrote is its own; the links it saw the tree through are gone (an
    # artifact upload of the report would follow them into the build tree)
    work = res.folder / "workdir"
    assert not any(p.is_symlink() for p in work.iterdir()), list(work.iterdir())
    assert (work / "logs").is_dir() and decoy.is_file()
    assert [p.name for p in (work / "logs" / "breakout").glob("*.ini")] != ["decoy.ini"]
    assert len(list((work / "logs" / "breakout").glob("*.ini"))) == 1


def test_the_workdirs_links_go_on_every_way_out(tmp_path: Path) -> None:
    """The trainer's folder shows the tree's entries as links while the block runs; what it
    writes (`[run] writes`: logs/) is its own and starts empty; an exception (a failed
    hazard shim build, a Ctrl-C) still removes every link, and so does a second signal
    landing while they are removed."""
    from harness.config.pin import load_pin
    from harness.errors import Interrupted
    from harness.pipeline import workdir
    from harness.report.model import Report
    from harness.vocab import RunMode

    tree = tmp_path / "tree"
    (tree / "config").mkdir(parents=True)
    (tree / "logs" / "breakout").mkdir(parents=True)
    (tree / "logs" / "breakout" / "old.ini").write_text("[metrics]\n")
    (tree / "puffer").write_text("#!/bin/sh\n")
    report = Report("r", tmp_path / "r", [], RunMode.RUN)
    with pytest.raises(Interrupted), workdir.linked(report, tree, load_pin("replica")) as work:
        assert (work / "config").is_symlink() and (work / "puffer").is_symlink()
        assert (work / "config").resolve() == (tree / "config").resolve()
        logs = work / "logs"
        assert logs.is_dir() and not logs.is_symlink() and not any(logs.iterdir())
        raise Interrupted(2)
    assert sorted(p.name for p in work.iterdir()) == ["logs"]
    assert (tree / "logs" / "breakout" / "old.ini").is_file()  # the tree is untouched

    calls = []
    real = Path.unlink

    def interrupted_once(self: Path, missing_ok: bool = False) -> None:
        calls.append(self.name)
        real(self, missing_ok)
        if len(calls) == 1:
            raise Interrupted(15)  # a signal's exception between two links

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "unlink", interrupted_once)
        with pytest.raises(Interrupted), workdir.linked(report, tree, load_pin("replica")):
            pass
    assert set(calls) == {"config", "puffer"}  # the one interrupted is tried again
    assert not any(p.is_symlink() for p in work.iterdir())
