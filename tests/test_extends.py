"""Pins that extend pins: a fork's pin (or a local git history of the replica) names the pin
it extends and runs the shipped scenarios, run and bisect alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main as cli_main
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.outcome import HANG, USAGE, Kind
from harness.pipeline.compare import default_variants
from harness.report.load import report_from_json
from harness.vocab import BlameHow
from tests.gitrepo import History, make_history, plan_with
from tests.harness_cli import verdict_of

ROOT = Path(__file__).resolve().parent.parent
# the runs of the shipped scenario, shortened without touching what is checked (the pin's
# extends, the scenario chosen, the verdict, the blame, the first bad commit): a passing
# commit trains one epoch, not four, and the env_start deadlock is called quiescent after
# 2 s, not at the 5 s startup window (the same verdict, location and stack)
SHORT_RUNS = ["--steps", "262144", "--quiescent", "2"]


def fork_pin(path: Path, repo: Path, tip: str = "0" * 12) -> Path:
    """A git pin of a fork: its own source and file hashes; build, run, signatures,
    variants and scenario settings inherited from the replica pin."""
    path.write_text(
        f"""schema_version = 1
name = "my-fork"
extends = "replica"
description = "a fork of the replica in a local git history"

[source]
kind = "git"
url = "{repo}"
branch = "main"
commit = "UNVERIFIED:{tip[:12]}"

[build]
env = {{REPLICA_FIX = "guards"}}   # merged into the replica's [build] table

[[signatures]]
name = "fork_only"
functions = ["fork_specific_reset"]

[files]
"""
    )
    return path


def test_extends_merges_tables_and_keeps_lineage(tmp_path: Path) -> None:
    base = load_pin("replica")
    pin = load_pin(str(fork_pin(tmp_path / "fork.toml", tmp_path)))
    assert pin.name == "my-fork" and pin.lineage == ("my-fork", "replica")
    assert pin.source.kind == "git" and pin.source.url == str(tmp_path)
    assert pin.files == {}  # a fork's file hashes are its own: never the parent's
    assert pin.build_command == base.build_command and pin.run_command == base.run_command
    assert pin.build_env == {"REPLICA_FIX": "guards"}
    assert pin.build_env_passthrough == base.build_env_passthrough
    assert pin.variants == base.variants
    # the pin's own signatures locate first, then the replica's
    assert [s.name for s in pin.signatures] == ["fork_only", "env_start", "vec_thread_main"]
    # the shipped scenario's [pin.replica] settings and pins = ["replica"] checks apply
    settings = load_scenario("breakout").settings(pin.lineage)
    assert settings.steps == load_scenario("breakout").settings("replica").steps


def test_compare_defaults_to_the_baseline_then_the_inherited_fixes(tmp_path: Path) -> None:
    """`harness compare` without --variants: data/defaults.toml's baseline, then the pin's
    `fixes` (the baseline once), which a pin inherits from the pin it extends."""
    (tmp_path / "base.toml").write_text(
        'schema_version = 1\nname = "base"\nextends = "replica"\n'
        'fixes = ["stock", "omp-free", "fixed"]\n'
    )
    (tmp_path / "child.toml").write_text(
        'schema_version = 1\nname = "child"\nextends = "base.toml"\n'
    )
    for name in ("base", "child"):
        pin = load_pin(str(tmp_path / f"{name}.toml"))
        assert pin.fixes == ("stock", "omp-free", "fixed")
        assert default_variants(pin) == ["stock", "omp-free", "fixed"]


def test_extends_a_path_source_keeps_its_folder(tmp_path: Path) -> None:
    """A pin that inherits a path source finds it where the parent declared it."""
    (tmp_path / "local.toml").write_text(
        'schema_version = 1\nname = "local"\nextends = "replica"\n'
    )
    pin = load_pin(str(tmp_path / "local.toml"))
    assert pin.source_root == load_pin("replica").source_root
    assert pin.files == load_pin("replica").files


def test_extends_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('schema_version = 1\nname = "a"\nextends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('schema_version = 1\nname = "b"\nextends = "a.toml"\n')
    (tmp_path / "c.toml").write_text('schema_version = 1\nname = "c"\nextends = "no-such"\n')
    for name, words in (("a", "loop"), ("c", "unknown pin 'no-such'")):
        with pytest.raises(HarnessError) as info:
            load_pin(str(tmp_path / f"{name}.toml"))
        assert words in info.value.message and "\n" not in info.value.message
        assert info.value.exit_code == USAGE


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> tuple[History, Path]:
    # base (serial reset), 2 churn commits, then "compact everything" (the hang), 1 churn
    h = make_history(tmp_path_factory.mktemp("fork"), plan_with(4, {3: "hang"}))
    return h, fork_pin(h.root.parent / "my-fork.toml", h.root, h.commits[-1])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_with_an_extending_pin_and_the_shipped_scenario(
    fork: tuple[History, Path],
    tmp_path: Path,
    cache_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", cache_env["HARNESS_CACHE_DIR"])
    h, pin = fork
    argv = ["run", "breakout", "--pin", str(pin), "--checkout", str(h.root)]
    argv += ["--startup", "5", *SHORT_RUNS, "--report-dir", str(tmp_path), "--json"]
    assert cli_main(argv) == HANG
    # --json: the report on stdout, typed as report.json is read back (no file of its folder
    # is read: the report root stands for the folder)
    report = report_from_json(json.loads(capsys.readouterr().out), tmp_path)
    assert report.pin is not None and report.pin.name == "my-fork"
    v = verdict_of(report)
    assert v.kind is Kind.HANG
    assert v.location == "env_start"
    # blame of the hang line in the fork's history: the commit that put the pragma there
    blame = v.blame
    assert blame is not None, v.blame_skipped
    assert blame.file == "src/vecenv.h"
    introduced = blame.pragma_introduced
    assert introduced is not None, blame
    assert introduced.subject == "compact everything"
    assert introduced.sha == h.first_bad
    assert introduced.how_found is BlameHow.LOG_S


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bisect_with_an_extending_pin_and_the_shipped_scenario(
    fork: tuple[History, Path],
    tmp_path: Path,
    cache_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", cache_env["HARNESS_CACHE_DIR"])
    h, pin = fork
    argv = ["bisect", "breakout", "--pin", str(pin), "--checkout", str(h.root)]
    argv += ["--good", h.commits[0], "--bad", h.commits[-1], "--location", "env_start"]
    argv += ["--startup", "5", "--stall", "5", *SHORT_RUNS, "--report-dir", str(tmp_path)]
    assert cli_main(argv) == 0
    [folder] = list(tmp_path.iterdir())
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "found"
    assert data["scenario"] == "breakout"
    assert data["result"]["first_bad"]["sha"] == h.first_bad
    assert data["result"]["first_bad"]["subject"] == "compact everything"
