"""What a person reads: paths printed whole at any width, no Python reprs in report.md, hints
that name only files that exist, numbers as the trainer meant them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from harness.report import writers
from harness.report.console import as_invoked, count, invoked_as
from harness.report.model import Report
from harness.report.store import finish
from harness.sampling.model import Frame, ThreadStack
from harness.vocab import RunMode, StackToolName, Trigger
from tests.harness_cli import ROOT, harness, watch_opts
from tests.samples import sample_set

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
    # --quiescent 0: a window's trigger (the early verdicts name no window)
    argv = ["watch", "--no-sample", *watch_opts(startup=2, stall=2, quiescent=0)]
    argv += ["--report-dir", str(root)]
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


def test_next_commands_name_the_harness_as_it_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup.sh puts nothing on PATH: a `next` command must be runnable as printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no `harness` on it
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "harness").write_text("#!/bin/sh\n")
    (venv / "harness").chmod(0o755)
    assert invoked_as(".venv/bin/harness") == ".venv/bin/harness"
    assert invoked_as(str(venv / "harness")) == ".venv/bin/harness"  # shown relative
    assert invoked_as("/elsewhere/harness") == "/elsewhere/harness"
    assert invoked_as("/x/harness/__main__.py").endswith("python -m harness")
    assert invoked_as("/x/pytest/__main__.py") == "harness"  # not run as the harness at all
    # on PATH, the plain name
    monkeypatch.setenv("PATH", f"{venv}:/usr/bin:/bin")
    assert invoked_as(str(venv / "harness")) == "harness"
    monkeypatch.setattr(sys, "argv", [".venv/bin/harness"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert as_invoked("harness compare breakout --variants stock,omp-free") == (
        ".venv/bin/harness compare breakout --variants stock,omp-free"
    )
    assert as_invoked("look at stacks.txt") == "look at stacks.txt"


def test_counts_are_exact() -> None:
    assert count(1_048_576.0) == "1,048,576"
    assert count(4.0) == "4"
    assert count(0.5) == "0.50"


# ---------------------------------------------------------------- the report's files


def _report(folder: Path, samples: bool) -> Report:
    folder.mkdir(parents=True)
    report = Report("run-1", folder, ["harness", "watch"], RunMode.WATCH, env="x")
    if samples:
        stack = ThreadStack(7, 7, "main", [Frame("env_start", own=True)], StackToolName.GDB)
        report.samples = sample_set(
            stacks=[stack], tools={"gdb": "used"}, notes=["a note"], duration_s=0.1
        )
    return report


def test_finish_writes_every_registered_file_and_lists_it(tmp_path: Path) -> None:
    report = _report(tmp_path / "r", samples=True)
    finish(report)
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    names = [w.name for w in writers.WRITERS]
    assert len(names) >= 5 and names[-1] == "report.html"  # the page links the others
    assert sorted(data["artifacts"]) == sorted(names), data["notes"]
    assert "env_start" in (tmp_path / "r" / "stacks.txt").read_text()
    assert data["notes"] == []


def test_without_samples_there_are_no_stack_files(tmp_path: Path) -> None:
    report = _report(tmp_path / "r", samples=False)
    finish(report)
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert "report.md" in data["artifacts"]
    assert not {"stacks.txt", "samples.json"} & set(data["artifacts"])
    assert not (tmp_path / "r" / "stacks.txt").exists()


def test_a_failing_writer_is_a_note_and_the_others_are_written(tmp_path: Path) -> None:
    def broken(report: Report) -> str:
        raise RuntimeError(f"no {report.env}")

    report = _report(tmp_path / "r", samples=False)
    chain = (writers.Writer("broken.txt", broken), *writers.WRITERS)
    written = writers.write_all(report, chain)
    assert report.notes == ["broken.txt not written: RuntimeError('no x')"]
    assert written == ["report.md", "junit.xml", "report.html"]
    assert all((tmp_path / "r" / name).is_file() for name in written)
    assert not (tmp_path / "r" / "broken.txt").exists()


def test_report_json_lists_the_files_of_the_folder_not_a_write_in_progress(
    tmp_path: Path,
) -> None:
    report = _report(tmp_path / "r", samples=False)
    (tmp_path / "r" / "output.log").write_text("a line\n")
    (tmp_path / "r" / ".report.md.x1y2").write_text("half")  # an atomic write under way
    (tmp_path / "r" / "workdir").mkdir()  # a trainer's working folder is no artifact
    finish(report)
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert sorted(data["artifacts"]) == sorted(
        ["output.log", "report.md", "junit.xml", "report.html"]
    )
    assert data["artifacts"]["output.log"] == "output.log"


def test_the_summary_shows_the_wake_chain_once(tmp_path: Path) -> None:
    """The chain has its own row (line) in the box, report.md and report.html; the
    verdict's evidence line that names it too (report.json keeps it) is not shown again."""
    import io

    from harness.analysis.classify import Verdict
    from harness.outcome import Kind
    from harness.report.console import print_summary
    from harness.report.html import render_html
    from harness.report.markdown import render_report
    from harness.sampling.model import WAKE_EVIDENCE

    chain = "pid 10 tid 10 (puffer) wait4 for child 11 → ends: nobody: no live thread"
    r = Report(
        "20260101-000000-breakout-abcd", tmp_path, ["harness", "run", "breakout"], RunMode.RUN
    )
    r.trigger = Trigger.CLOSED
    r.verdict = Verdict(
        Kind.HANG,
        summary="hang (deadlock) in env_start",
        evidence=["a closed set", f"{WAKE_EVIDENCE}{chain}", "pid 10 waits on the tree"],
        wake_chain=chain,
    )
    out = io.StringIO()
    print_summary(r, out)
    text = out.getvalue()
    assert "chain" in text and "a closed set" in text and "pid 10 waits on the tree" in text
    assert WAKE_EVIDENCE not in text and text.count("wait4 for child 11") == 1
    # report.md and report.html: the chain line, and the evidence without it
    for page in (render_report(r), render_html(r)):
        assert "a closed set" in page and "pid 10 waits on the tree" in page
        assert WAKE_EVIDENCE not in page and page.count("wait4 for child 11") == 1, page
