"""`harness diff A B` (issue 19, "it hangs there, not here"): reports written by real runs
(a program that passes, one that stops itself with SIGSTOP), then edited copies of them (the
trainer's CPU affinity changed in one copy's host fingerprint, an older report without a
fingerprint, a report from a future harness), repeat aggregates laid out as `--repeat`
writes them (and moved elsewhere, as a CI artifact is), an aggregate whose run folder is a
symlink out of it, damaged aggregates, and folders that are no report at all."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import diff as cli_diff
from harness.cli.options import Parser
from harness.doctor.fingerprint import take_fingerprint
from harness.errors import HarnessError
from harness.outcome import USAGE, DiffExit, Kind
from harness.pipeline.diff import Change, diff_paths, read_side
from tests.harness_cli import ROOT, harness, verdict_of

pytestmark = pytest.mark.timeout(120)
Edit = Callable[[dict[str, Any]], None]


@pytest.fixture(scope="module")
def passed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pass")
    res = harness("watch", "--", "/bin/true", report_root=root)
    assert res.code == 0, res.stderr
    return res.folder


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real hang: the command stops itself (state T), found at the stall limit."""
    root = tmp_path_factory.mktemp("hang")
    res = harness(
        "watch",
        "--timeout",
        "20",
        "--stall",
        "2",
        "--startup",
        "2",
        "--",
        "sh",
        "-c",
        "kill -STOP $$",
        report_root=root,
    )
    assert verdict_of(res.loaded).kind is Kind.HANG, res.stderr
    return res.folder


def _copy(src: Path, dst: Path, edit: Edit | None = None) -> Path:
    """A copy of the report folder `src` at `dst`, its report.json edited by `edit`."""
    shutil.copytree(src, dst)
    if edit is not None:
        path = dst / "report.json"
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return dst


def _with_host(affinity: list[int]) -> Edit:
    """The host fingerprint of this machine, with the trainer's affinity `affinity`."""

    def edit(data: dict[str, Any]) -> None:
        data["host"] = take_fingerprint({}, affinity).to_json()

    return edit


def _aggregate(folder: Path, first_run: Path, counts: dict[str, int], **extra: Any) -> Path:
    """A repeat aggregate as `--repeat` lays it out: repeat.json beside runs/001/<run>, the
    first run a copy of `first_run`; rows name absolute folders, as the writer records them."""
    run = folder / "runs" / "001" / first_run.name
    shutil.copytree(first_run, run)
    hangs = counts.get("hang", 0)
    groups = [{"kind": "hang", "mechanism": "stopped", "location": None, "cause": None}]
    data = {
        "schema_version": 1,
        "mode": "repeat",
        "directory": str(folder),
        "runs": sum(counts.values()),
        "counts": counts,
        "hang_rate": hangs / sum(counts.values()),
        "hang_rate_ci95": [0.0, 1.0],
        "groups": [{**groups[0], "count": hangs, "first_run": str(run)}] if hangs else [],
        "rows": [{"report_dir": str(run), "kind": "pass"}],
        **extra,
    }
    (folder / "repeat.json").write_text(json.dumps(data))
    return folder


# ------------------------------------------------------------------------- reports


@pytest.mark.slow
def test_affinity_named_first_next_to_the_verdicts(
    stopped: Path, passed: Path, tmp_path: Path
) -> None:
    """The seed's case: it hangs there (one CPU given to the trainer), not here."""
    there = _copy(stopped, tmp_path / "there", _with_host([0]))
    here = _copy(passed, tmp_path / "here", _with_host([0, 1, 2, 3]))
    result = diff_paths(there, here)
    assert result.changes[0] == Change("host", "trainer_affinity", "0", "0-3")
    sections = [c.section for c in result.changes]
    assert "args" in sections and sections.index("host") < sections.index("args")
    rows = {r.key: r for r in result.verdicts}
    assert (rows["kind"].a, rows["kind"].b) == ("hang", "pass")
    assert rows["mechanism"].a == "stopped" and rows["mechanism"].differs
    assert result.verdicts_differ and result.exit_code == DiffExit.DIFFERENT
    data = result.to_json()
    assert data["differences"][0]["key"] == "trainer_affinity"
    assert data["exit_code"] == DiffExit.DIFFERENT and data["a"]["verdict"]["kind"] == "hang"


def test_same_verdict_only_the_affinity_differs(passed: Path, tmp_path: Path) -> None:
    a = _copy(passed, tmp_path / "a", _with_host([0]))
    b = _copy(passed, tmp_path / "b", _with_host([0, 1]))
    result = diff_paths(a / "report.json", b)  # the file or the folder
    assert result.changes == [Change("host", "trainer_affinity", "0", "0-1")]
    assert not result.verdicts_differ and result.exit_code == DiffExit.SAME


def test_a_report_against_itself_differs_in_nothing(passed: Path) -> None:
    result = diff_paths(passed, passed)
    assert result.changes == [] and result.exit_code == DiffExit.SAME
    assert [r.key for r in result.verdicts] == ["kind", "mechanism", "location", "top cause"]


def test_an_older_report_without_a_fingerprint(passed: Path, tmp_path: Path) -> None:
    def older(data: dict[str, Any]) -> None:
        data.pop("host", None)
        data.pop("conditions", None)

    old = _copy(passed, tmp_path / "old", older)
    new = _copy(passed, tmp_path / "new", _with_host([0]))
    assert read_side(old).report is not None
    result = diff_paths(old, new)
    assert result.changes == [
        Change("host", "fingerprint", "not recorded (an older report)", "recorded")
    ]


def test_settings_that_differ_by_section(passed: Path, tmp_path: Path) -> None:
    """The trainer's env and knobs, conditions and build, each named; paths that only say
    where a tree or report was are not a difference."""

    def setup(knob: str, omp: str, cpus: list[int] | None) -> Edit:
        def edit(data: dict[str, Any]) -> None:
            cmd = data["command"]
            folder = f"/somewhere/{data['run_id']}/workdir"
            cmd["argv"] = ["train", "--vec.num_buffers", knob, "--out", folder]
            cmd["env"] = {"OMP_NUM_THREADS": omp}
            data["conditions"] = {"cpus": cpus, "load": 0, "env": {}, "profile": None}

        return edit

    a = _copy(passed, tmp_path / "a", setup("2", "1", [0]))
    b = _copy(passed, tmp_path / "b", setup("4", "1", None))
    got = {(c.section, c.key): (c.a, c.b) for c in diff_paths(a, b).changes}
    assert got == {("knobs", "--vec.num_buffers"): ("2", "4"), ("conditions", "cpus"): ("0", "")}


# ------------------------------------------------------------------------- bad input


def test_not_a_report_is_one_line(tmp_path: Path, passed: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    newer = _copy(passed, tmp_path / "newer", lambda d: d.update(schema_version=99))
    cases = [
        (empty, "has no report.json or repeat.json"),
        (tmp_path / "absent", "no such file"),
        (newer, "newer than this harness reads"),
    ]
    for path, words in cases:
        with pytest.raises(HarnessError) as err:
            diff_paths(path, passed)
        assert words in err.value.message and "\n" not in err.value.message
        assert err.value.exit_code == USAGE


# ------------------------------------------------------------------------- aggregates


def test_aggregates_compare_their_rates(passed: Path, tmp_path: Path) -> None:
    flaky = _aggregate(tmp_path / "flaky", passed, {"hang": 7, "pass": 3})
    clean = _aggregate(tmp_path / "clean", passed, {"pass": 10})
    result = diff_paths(flaky, clean / "repeat.json")
    rows = {r.key: r for r in result.verdicts}
    assert rows["hang rate"].a.startswith("7/10 (70%") and rows["hang rate"].b.startswith("0/10")
    assert result.verdicts_differ and result.exit_code == DiffExit.DIFFERENT
    assert any("separated at 95%" in n for n in result.notes)
    assert result.a.report is not None  # the first run's settings, read from its folder


def test_rates_not_separated_are_the_same_with_a_note(passed: Path, tmp_path: Path) -> None:
    one = _aggregate(tmp_path / "one", passed, {"hang": 1, "pass": 9})
    two = _aggregate(tmp_path / "two", passed, {"hang": 2, "pass": 8})
    result = diff_paths(one, two)
    assert result.exit_code == DiffExit.SAME
    assert any("not separated at 95%" in n and "runs a side" in n for n in result.notes)


def test_a_report_against_an_aggregate(passed: Path, tmp_path: Path) -> None:
    """One run that hung against 30 clean runs: 0/30's upper bound is under 1/1's lower."""
    hung = _copy(passed, tmp_path / "hung", lambda d: d["verdict"].update(kind="hang"))
    clean = _aggregate(tmp_path / "clean", passed, {"pass": 30})
    assert diff_paths(hung, clean).exit_code == DiffExit.DIFFERENT
    assert diff_paths(passed, clean).exit_code == DiffExit.SAME


def test_a_moved_aggregate_still_finds_its_first_run(passed: Path, tmp_path: Path) -> None:
    """Downloaded elsewhere (a CI artifact): rows name the folders where it was written."""
    agg = _aggregate(tmp_path / "ci" / "cell", passed, {"pass": 3})
    moved = tmp_path / "downloaded"
    shutil.move(agg, moved)
    side = read_side(moved)
    assert side.report is not None and side.notes == []
    assert str(side.report.directory).startswith(str(moved.resolve()))


def test_an_aggregate_cannot_point_out_of_its_folder(passed: Path, tmp_path: Path) -> None:
    """A run folder that is a symlink to a report elsewhere is not read: a note, no
    settings compared, the rates still are."""
    agg = _aggregate(tmp_path / "agg", passed, {"pass": 3})
    run = agg / "runs" / "001" / passed.name
    shutil.rmtree(run)
    run.symlink_to(passed)
    side = read_side(agg)
    assert side.report is None and "is not inside" in side.notes[0]
    outside = _aggregate(tmp_path / "agg2", passed, {"pass": 3})
    data = json.loads((outside / "repeat.json").read_text())
    data["rows"][0]["report_dir"] = str(passed)
    data["directory"] = None
    (outside / "repeat.json").write_text(json.dumps(data))
    result = diff_paths(side.path, outside)
    assert result.changes == [] and result.exit_code == DiffExit.SAME
    assert len([n for n in result.notes if "is not inside" in n]) == 2


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ({"counts": {"quantum": 1}}, "counts.quantum"),
        ({"counts": {"hang": -1}}, "counts.hang: must be >= 0, not -1"),
        ({"counts": {"hang": True}}, "counts.hang"),
        ({"counts": {}}, "counts: expected at least 1 entries"),
        ({"rows": [{"report_dir": 7}]}, "rows[0].report_dir: expected a string, found a number"),
        ({"schema_version": 99}, "newer than this harness reads"),
        ({"mode": "sweep"}, 'mode "repeat"'),
        ({"groups": [{"kind": 3}]}, "groups[0]"),
    ],
)
def test_a_damaged_aggregate_is_one_line(
    passed: Path, tmp_path: Path, edit: dict[str, Any], words: str
) -> None:
    agg = _aggregate(tmp_path / "agg", passed, {"hang": 1, "pass": 1})
    data = {**json.loads((agg / "repeat.json").read_text()), **edit}
    (agg / "repeat.json").write_text(json.dumps(data))
    with pytest.raises(HarnessError) as err:
        read_side(agg)
    assert words in err.value.message and "\n" not in err.value.message


# ------------------------------------------------------------------------- command line


def _cli(*argv: str) -> argparse.Namespace:
    """The diff command's parser, as harness.cli builds it for every command."""
    parser = Parser(prog="harness")
    cli_diff.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args([cli_diff.NAME, *argv])


def test_cli_table_and_json(
    passed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _copy(passed, tmp_path / "a", _with_host([0]))
    b = _copy(passed, tmp_path / "b", _with_host([0, 1]))
    assert cli_diff.command(_cli(str(a), str(b))) == DiffExit.SAME
    out = capsys.readouterr().out
    assert "trainer_affinity" in out and "the verdicts are the same" in out
    assert cli_diff.command(_cli(str(a), str(b), "--json")) == DiffExit.SAME
    data = json.loads(capsys.readouterr().out)
    assert data["differences"] == [
        {"section": "host", "key": "trainer_affinity", "a": "0", "b": "0-1"}
    ]


def test_cli_bad_input_raises_the_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as err:
        cli_diff.command(_cli(str(tmp_path), str(tmp_path)))
    assert err.value.exit_code == USAGE


def test_harness_diff_registered(passed: Path, tmp_path: Path) -> None:
    """Through `python -m harness diff` (needs `diff` in harness/cli/__init__.py's
    _MODULES): exit 0 on equal verdicts, 5 and one line on a folder that is no report."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "harness", "diff"]
    ok = subprocess.run(
        [*argv, str(passed), str(passed)], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert ok.returncode == DiffExit.SAME, ok.stderr
    bad = subprocess.run(
        [*argv, str(tmp_path), str(passed)], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert bad.returncode == USAGE
    lines = bad.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "not a harness report or repeat aggregate" in lines[0]
