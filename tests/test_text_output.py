"""What a person reads: paths printed whole at any width, no Python reprs in report.md, hints
that name only files that exist, numbers as the trainer meant them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness.report.console import count
from tests.harness_cli import ROOT, harness

PROGRAMS = ROOT / "tests" / "programs"


def deep(tmp_path: Path) -> Path:
    """A report folder path far longer than 80 columns."""
    return tmp_path.joinpath(*(["a-rather-long-folder-name-for-reports"] * 4))


@pytest.mark.timeout(60)
def test_paths_are_whole_and_report_md_has_no_reprs(tmp_path: Path) -> None:
    root = deep(tmp_path)
    res = harness(
        "watch",
        "--report-dir",
        str(root),
        "--",
        sys.executable,
        "-c",
        "print('hello')",
        report_root=root,
        env={"COLUMNS": "80"},
    )
    assert res.code == 0, res.stderr
    assert res.report_dir is not None
    assert f"report: {res.report_dir}" in res.stdout.splitlines()
    md = (res.report_dir / "report.md").read_text()
    assert "{'" not in md and "None" not in md, md
    assert "exit status 0" in md
    # a watch is titled with its command, and has no pin row
    assert f"harness watch: {sys.executable} -c print('hello')" in md
    assert "pin -" not in res.stdout


@pytest.mark.timeout(90)
def test_no_sample_hang_points_at_files_that_exist(tmp_path: Path) -> None:
    root = deep(tmp_path)
    argv = ["watch", "--no-sample", "--startup", "2", "--stall", "2", "--report-dir", str(root)]
    res = harness(*argv, "--", sys.executable, str(PROGRAMS / "py_deadlock.py"), report_root=root)
    assert res.code == 2, res.stdout + res.stderr
    assert res.report_dir is not None
    assert not (res.report_dir / "stacks.txt").exists()
    [next_line] = [ln for ln in res.stdout.splitlines() if ln.startswith("next:")]
    assert "stacks.txt" not in next_line
    named = Path(re.findall(r"(/\S+)", next_line)[0].rstrip(";"))
    assert named.exists(), next_line
    trigger = [ln for ln in res.stdout.splitlines() if "trigger" in ln]
    assert trigger and "window 2s" in trigger[0], res.stdout  # the window it waited for


def test_counts_are_exact() -> None:
    assert count(1_048_576.0) == "1,048,576"
    assert count(4.0) == "4"
    assert count(0.5) == "0.50"
