"""Bisect over real git histories of the replica (tests/gitrepo.py): real builds, real runs,
real hangs. Builds go to a per-session cache (HARNESS_CACHE_DIR), shared by the tests of
this file, so later tests show cache hits; the user's cache is never touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness import bisect as bis
from harness.cli import main as cli_main
from harness.errors import HarnessError
from harness.outcome import USAGE, BisectStepExit, Kind
from harness.pipeline.options import RunOptions
from harness.vocab import BisectClass, BisectRole
from tests.gitrepo import ROOT, SUBJECTS, History, git, make_history, plan_with, write_scenario

# a build cache of the module's own (its histories build many commits; tests/conftest.py)
pytestmark = [pytest.mark.usefixtures("private_harness_cache"), pytest.mark.spread]

# the replica's first dashboard comes after ~0.5 s here, and frames every ~0.5 s; a hang is
# declared at 4 s (3 s once called the good end's healthy run a hang while three test workers
# loaded two cores)
STARTUP_S = 4
# the bad commits' hang (the env_start deadlock) is called quiescent after 2 s instead of
# the startup window's 4: the same verdict, location and stack (test_quiescence.py checks
# the rule on this very hang), two seconds less per bad run; a healthy run computes, so it
# is never quiescent however loaded the machine
QUIESCENT_S = 2


def log2_ceil(n: int) -> int:
    return (n - 1).bit_length()


def history(tmp_path_factory: pytest.TempPathFactory, name: str, plan: list[str]) -> History:
    h = make_history(tmp_path_factory.mktemp(name), plan)
    write_scenario(h.scenario, startup_s=STARTUP_S, stall_s=STARTUP_S)
    return h


def options(h: History, report_dir: Path, **kw: Any) -> bis.BisectOptions:
    base = bis.BisectOptions(
        run=RunOptions(
            env="breakout",
            pin=str(h.pin),
            checkout=h.root,
            scenario=str(h.scenario),
            report_dir=report_dir,
            quiescent_s=QUIESCENT_S,
        ),
        good=h.commits[0],
        bad=h.commits[-1],
        expect="hang",
        location="env_start",
        repeat=1,  # the classic binary search (the posterior one: test_bisect_posterior.py)
    )
    return replace(base, **kw)


# 33 commits: the base, then 32 (N = 32 candidates); the hang comes in at commit 21
@pytest.fixture(scope="module")
def main_history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return history(tmp_path_factory, "main", plan_with(32, {21: "hang"}))


@pytest.fixture(scope="module")
def main_result(
    main_history: History, tmp_path_factory: pytest.TempPathFactory
) -> bis.BisectResult:
    out = tmp_path_factory.mktemp("reports")
    return bis.bisect(options(main_history, out, confirm_fix="fixed"))


# ---------------------------------------------------------------- the search


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.xdist_group("bisect-main")  # one worker: they share the bisect of main_result
def test_names_compact_everything_in_log2_builds(
    main_history: History, main_result: bis.BisectResult
) -> None:
    r = main_result
    n = len(r.candidates)
    assert n == 32
    assert r.status == "found" and r.exit_code == 0
    assert r.first_bad is not None and r.parent is not None
    assert r.first_bad.commit.sha == main_history.first_bad
    assert r.first_bad.commit.subject == "compact everything"
    assert r.parent.commit.sha == main_history.commits[20]
    assert r.location_matched is True
    search = r.search_steps
    assert len(search) <= log2_ceil(n) + 2
    builds = {run.build_key for s in search for run in s.runs}
    assert len(builds) <= log2_ceil(n) + 2, builds
    assert r.fix_confirmed is True
    assert "src/vecenv.h" in r.diffstat
    data = json.loads((r.directory / "report.json").read_text())
    assert data["schema_version"] == 1 and data["status"] == "found"
    assert data["result"]["first_bad"]["subject"] == "compact everything"
    assert data["result"]["first_bad_run"]["location"] == "env_start"
    assert data["result"]["first_bad_run"]["kind"] == "hang"
    assert any("env_start" in f for f in data["result"]["first_bad_run"]["location_frames"])
    assert data["result"]["parent_run"]["kind"] == "pass"
    assert data["confirm_fix"]["confirmed"] is True
    assert data["totals"]["steps"] <= data["totals"]["step_bound"]
    assert data["result"]["first_bad_run"]["classification"] == "bad"
    assert data["result"]["first_bad_run"]["values"] == {"commit": main_history.first_bad[:12]}
    assert "compact everything" in (r.directory / "report.md").read_text()
    # the steps as a multi-run table: every step's run linked from index.html
    index = (r.directory / "index.html").read_text()
    assert len(r.steps) >= 3
    for step in r.steps:
        run_dir = step.decisive.report_dir
        assert run_dir is not None and (Path(run_dir) / "report.html").is_file()
        link = os.path.relpath(Path(run_dir, "report.html"), r.directory)
        assert f'href="{link}"' in index, link


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.xdist_group("bisect-main")  # one worker: they share the bisect of main_result
def test_rerun_reuses_builds_and_repeats(
    main_history: History, main_result: bis.BisectResult, tmp_path: Path
) -> None:
    """The same commits again (narrowed to 20..22), each run twice unless it fails: every
    build is a cache hit from the first bisect; a bad step stops at its first failure."""
    h = main_history
    assert main_result.status == "found"  # warms the cache
    r = bis.bisect(options(h, tmp_path, good=h.commits[20], bad=h.commits[22], repeat=2))
    assert r.first_bad is not None and r.first_bad.commit.sha == h.first_bad
    totals = r.totals()
    assert totals["builds"] == 0 and totals["cache_hits"] == totals["runs"]
    counts = {s.role: s.counts() for s in r.search_steps}
    assert counts[BisectRole.GOOD_END] == {"runs": 2, "good": 2, "bad": 0, "skip": 0}
    assert counts[BisectRole.BAD_END] == {"runs": 1, "good": 0, "bad": 1, "skip": 0}


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_unrelated_failure_is_skipped(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Commits 7-8 exit on a strict dashboard read (a different failure): under --expect
    hang --location env_start they are skipped, and the answer is still exact."""
    h = history(tmp_path_factory, "crash", plan_with(16, {7: "crash", 9: "uncrash", 12: "hang"}))
    r = bis.bisect(options(h, tmp_path_factory.mktemp("reports")))
    assert r.status == "found"
    assert r.first_bad is not None and r.first_bad.commit.sha == h.first_bad
    skipped = [s for s in r.search_steps if s.classification == BisectClass.SKIP]
    assert skipped, "the search should have probed the crashing commits"
    assert {s.decisive.kind for s in skipped} == {"error-exit"}
    assert {s.commit.subject for s in skipped} <= {
        SUBJECTS["crash"],
        "churn 8: tidy vecenv and friends",
    }
    assert len(r.search_steps) <= r.step_bound

    # the same history, any failure counts: the strict read is now the first bad commit
    anyr = bis.bisect(
        options(h, tmp_path_factory.mktemp("reports"), expect="any-failure", location=None)
    )
    assert anyr.first_bad is not None
    assert anyr.first_bad.commit.subject == SUBJECTS["crash"]
    assert anyr.first_bad.decisive.kind == "error-exit"
    assert anyr.location_matched is None


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_broken_builds_around_the_change_give_a_range(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Commits 6-8 do not compile, and "compact everything" (8) lands while the build is
    broken: no run can tell which of 6..9 brought the hang in, so the answer is that range."""
    plan = plan_with(16, {6: "break", 8: "hang", 9: "unbreak"})
    h = history(tmp_path_factory, "broken", plan)
    r = bis.bisect(options(h, tmp_path_factory.mktemp("reports")))
    assert r.status == "range" and r.exit_code == 1
    assert [c.sha for c in r.possible] == h.commits[6:10]
    assert "compact everything" in [c.subject for c in r.possible]
    assert "could be any of" in r.message()
    skipped = [s for s in r.search_steps if s.classification == BisectClass.SKIP]
    assert skipped and all(s.decisive.kind == "build-failed" for s in skipped)
    assert len(r.search_steps) <= r.step_bound
    data = json.loads((r.directory / "report.json").read_text())
    assert data["status"] == "range" and len(data["result"]["possible"]) == 4


# ---------------------------------------------------------------- soundness errors


def expect_usage(opts: bis.BisectOptions, words: str) -> HarnessError:
    with pytest.raises(HarnessError) as info:
        bis.bisect(opts)
    assert info.value.exit_code == USAGE
    assert words in info.value.message and "\n" not in info.value.message
    return info.value


def test_reversed_equal_unknown_ends(main_history: History, tmp_path: Path) -> None:
    h = main_history
    expect_usage(options(h, tmp_path, good=h.commits[-1], bad=h.commits[0]), "reversed")
    expect_usage(options(h, tmp_path, good=h.commits[3], bad=h.commits[3]), "same commit")
    expect_usage(options(h, tmp_path, good="no-such-rev"), "unknown revision")
    expect_usage(options(h, tmp_path, expect="explode"), "--expect")
    assert not any(tmp_path.iterdir()), "nothing should run (nor be reported) on bad input"


def test_good_not_an_ancestor(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    h = make_history(tmp_path_factory.mktemp("side"), plan_with(3, {}))
    git(h.root, "checkout", "--quiet", "-b", "side", h.commits[1])
    (h.root / "src" / "side.txt").write_text("a side branch\n")
    git(h.root, "add", "-A")
    git(h.root, "commit", "--quiet", "-m", "side work")
    side = git(h.root, "rev-parse", "HEAD")
    git(h.root, "checkout", "--quiet", "main")
    expect_usage(options(h, tmp_path, good=side), "not an ancestor")


def test_cli_usage_error_exit_code(main_history: History, tmp_path: Path) -> None:
    h = main_history
    argv = ["bisect", "breakout", "--pin", str(h.pin), "--checkout", str(h.root)]
    argv += ["--good", h.commits[2], "--bad", h.commits[2], "--report-dir", str(tmp_path)]
    assert cli_main(argv) == USAGE


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_bad_end_that_passes(main_history: History, tmp_path: Path) -> None:
    h = main_history
    err = expect_usage(options(h, tmp_path, bad=h.commits[10]), "passed: nothing to bisect")
    assert h.commits[10][:12] in err.message
    (report,) = tmp_path.glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["status"] == "failed" and "nothing to bisect" in data["error"]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_good_end_that_fails(main_history: History, tmp_path: Path) -> None:
    h = main_history
    err = expect_usage(
        options(h, tmp_path, good=h.commits[22], bad=h.commits[24]), "shows the failure"
    )
    assert h.commits[22][:12] in err.message


def test_classification_rules() -> None:
    c = bis.classify_run
    assert c(Kind.PASS, None, "hang", "env_start") == BisectClass.GOOD
    assert c(Kind.HANG, "env_start", "hang", "env_start") == BisectClass.BAD
    assert c(Kind.HANG, "vec_thread_main", "hang", "env_start") == BisectClass.SKIP
    assert c(Kind.HANG, None, "hang", None) == BisectClass.BAD
    assert c(Kind.ERROR_EXIT, None, "hang", None) == BisectClass.SKIP
    assert c(Kind.ERROR_EXIT, None, "crash", None) == BisectClass.BAD
    assert c(Kind.BUILD_FAILED, None, "any-failure", None) == BisectClass.SKIP
    assert c(Kind.CHECK_FAILED, None, "any-failure", None) == BisectClass.BAD
    assert bis.combine([BisectClass.GOOD, BisectClass.BAD]) == BisectClass.BAD
    assert bis.combine([BisectClass.GOOD] * 3) == BisectClass.GOOD
    assert bis.combine([BisectClass.GOOD, BisectClass.SKIP]) == BisectClass.SKIP
    assert bis.combine([]) == BisectClass.SKIP


# ---------------------------------------------------------------- git bisect run


def step_command() -> list[str]:
    return [sys.executable, "-m", "harness", "bisect-step"]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_git_bisect_run_with_bisect_step(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """8 commits; commit 3 does not build (git probes it first: exit 125, skip), the hang
    comes in at 5. git bisect run reads 0/1/125 from bisect-step and names commit 5."""
    h = history(tmp_path_factory, "gitrun", plan_with(7, {3: "break", 4: "unbreak", 5: "hang"}))
    git(h.root, "bisect", "start", h.commits[-1], h.commits[0])
    cmd = [*step_command(), "breakout", "--pin", str(h.pin), "--scenario", str(h.scenario)]
    cmd += ["--expect", "hang", "--location", "env_start", "--report-dir", str(tmp_path)]
    cmd += ["--quiescent", str(QUIESCENT_S)]
    env_path = {"PYTHONPATH": str(ROOT)}
    try:
        res = subprocess.run(
            ["git", "-C", str(h.root), "bisect", "run", *cmd],
            capture_output=True,
            text=True,
            timeout=140,
            env={**os.environ, **env_path},
            check=False,
        )
        log = git(h.root, "bisect", "log")
    finally:
        git(h.root, "bisect", "reset")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{h.first_bad} is the first bad commit" in res.stdout, res.stdout
    assert f"# skip: [{h.commits[3]}]" in log, log
    assert "# good: [" in log and "# bad: [" in log
    # the step's own lines say what each exit code meant
    assert "→ skip (exit 125" in res.stdout + res.stderr
    assert "→ bad (exit 1" in res.stdout + res.stderr


def test_bisect_step_aborts_on_usage_error(main_history: History, tmp_path: Path) -> None:
    """A bad option must not mark commits bad: exit 255 stops git bisect run."""
    cmd = [*step_command(), "breakout", "--pin", str(tmp_path / "missing.toml")]
    res = subprocess.run(
        cmd, cwd=main_history.root, capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == BisectStepExit.ABORT, res.stderr
    for wrong in (["--repeat", "0"], ["--expct", "hang"]):  # argparse errors too
        res = subprocess.run(
            [*step_command(), "breakout", *wrong],
            cwd=main_history.root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode == BisectStepExit.ABORT, res.stderr
