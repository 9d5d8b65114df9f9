"""`harness sweep`: the knob matrix on the replica, every cell a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis.causes import Cause
from harness.analysis.classify import Verdict
from harness.errors import HarnessError
from harness.files import atomic_write
from harness.outcome import Kind
from harness.pipeline.sweep import Knob, conclude, parse_knobs
from harness.report import github
from harness.report.matrix import Matrix, write_matrix
from harness.report.model import Report
from harness.report.runs import RunRow, load_row, row_from_error
from harness.vocab import AxisKind, Confidence, Mechanism, RunMode, RunStatus, TableKind
from tests.harness_cli import harness


def test_knobs_parse_and_bad_ones_are_usage_errors() -> None:
    knobs = parse_knobs(["vec.num_buffers=1,2"], ["OMP_WAIT_POLICY=active,passive"], "a,b")
    assert [(k.kind, k.label, k.values) for k in knobs] == [
        ("set", "--vec.num_buffers", ("1", "2")),
        ("env", "OMP_WAIT_POLICY", ("active", "passive")),
        ("variant", "variant", ("a", "b")),
    ]
    for sets, envs, variants in ((["novalue"], [], None), ([], ["K="], None), ([], [], None)):
        with pytest.raises(HarnessError) as info:
            parse_knobs(sets, envs, variants)
        assert info.value.exit_code == 5 and "\n" not in info.value.message


def _cells(runs: int, kinds: dict[tuple[str, str], Kind]) -> list[RunRow]:
    """Four cells (A × variant), each `runs` runs that all ended as its kind."""
    return [
        RunRow({"A": x, "variant": y}, y, kind=k, runs=runs, counts={k: runs} if runs > 1 else {})
        for (x, y), k in kinds.items()
    ]


STOCK_HANGS = {
    ("1", "s"): Kind.HANG,
    ("1", "f"): Kind.PASS,
    ("2", "s"): Kind.HANG,
    ("2", "f"): Kind.PASS,
}


def test_conclusion_on_one_run_per_cell_is_unsettled() -> None:
    """One run per cell separates nothing at 95%: no knob is ruled out, and the one whose
    cells differ is unsettled with the runs that would settle it."""
    a, v = Knob(AxisKind.ENV, "A", ("1", "2")), Knob(AxisKind.VARIANT, "variant", ("s", "f"))
    lines = conclude([a, v], _cells(1, STOCK_HANGS))
    assert lines[0].startswith("A is unsettled (1 → hang/pass; 2 → hang/pass)"), lines
    assert "4 runs per cell of one verdict each would rule it out" in lines[0]
    assert lines[1] == (
        "variant is unsettled (s → hang; f → pass): about 4 runs per cell would settle it at "
        "the rates seen"
    )


def test_conclusion_names_the_knob_that_matters() -> None:
    a, v = Knob(AxisKind.ENV, "A", ("1", "2")), Knob(AxisKind.VARIANT, "variant", ("s", "f"))
    rows = _cells(4, STOCK_HANGS)
    lines = conclude([a, v], rows)
    assert lines[0].startswith("A is ruled out"), lines
    assert lines[1].startswith("variant changes the outcome (s → hang 8/8; f → pass 8/8)")
    rows[2] = _cells(4, {("2", "s"): Kind.PASS})[0]  # now A=2 turns the stock hang into a pass
    assert conclude([a, v], rows)[0].startswith("A changes the outcome")
    rows[2] = RunRow({"A": "2", "variant": "s"}, "s", Kind.HANG, runs=4,
                     counts={Kind.HANG: 2, Kind.PASS: 2})  # fmt: skip
    assert conclude([a, v], rows)[0].startswith("A is unsettled"), "2/4 vs 4/4 is not separated"
    rows[3] = row_from_error("the build of f failed", None, {"A": "2", "variant": "f"}, "f")
    assert conclude([a, v], rows)[-1] == "1 cell(s) could not run: see their summaries"


def _saved_hang(folder: Path) -> Path:
    """A report folder as a child harness leaves it: report.json of a located hang."""
    report = Report(
        "run-1", folder, ["harness", "run"], RunMode.RUN, status=RunStatus.COMPLETE, env="x"
    )
    report.verdict = Verdict(
        Kind.HANG,
        "hang in env_start",
        mechanism=Mechanism.DEADLOCK,
        location="env_start",
        location_frames=["env_start", "GOMP_parallel"],
        evidence=[f"line {i}" for i in range(12)],
        causes=[Cause("openmp-after-fork", "OpenMP after fork", Confidence.HIGH)],
    )
    report.timings.run_s = 3.5
    atomic_write(folder / "report.json", json.dumps(report.to_json()))
    return folder


def test_rows_from_a_saved_report_and_from_errors(tmp_path: Path) -> None:
    values = {"OMP_WAIT_POLICY": "active", "variant": "stock"}
    _saved_hang(tmp_path / "cells" / "000" / "run-1")
    row = load_row(tmp_path / "cells" / "000", 2, values, "stock", "unused")
    assert (row.kind, row.mechanism, row.location) == (Kind.HANG, "deadlock", "env_start")
    assert row.cause == "openmp-after-fork" and row.run_s == 3.5 and row.exit_code == 2
    assert len(row.evidence) == 8 and row.error is None
    assert row.report_dir == str(tmp_path / "cells" / "000" / "run-1")
    assert row.runs == 1 and row.rate(Kind.HANG) == 1.0 and row.rate(Kind.PASS) == 0.0
    # a cell whose harness left no report: an error row that says why
    none = load_row(tmp_path / "cells" / "001", 5, values, "stock", "unknown variant 'x'")
    assert none.kind is Kind.ERROR and none.summary == none.error == "unknown variant 'x'"
    assert none.report_dir is None
    # a folder with something that is not a report: the loader's one-line reason
    (tmp_path / "cells" / "002" / "bad").mkdir(parents=True)
    (tmp_path / "cells" / "002" / "bad" / "report.json").write_text("[1]")
    bad = load_row(tmp_path / "cells" / "002", 0, values, "stock", "unused")
    assert bad.kind is Kind.ERROR and "not a harness report" in bad.summary


def test_one_writer_for_every_multi_run_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON, Markdown, index.html and the step summary from the same rows and columns."""
    run = _saved_hang(tmp_path / "runs" / "run-1")
    (run / "report.html").write_text("<p>the run's page</p>")
    hang = load_row(run, 2, {"variant": "stock"}, "stock", "unused")
    error = row_from_error("patch <x> | does not apply", 5, {"variant": "fixed"}, "fixed")
    m = Matrix(
        TableKind.COMPARE, "harness compare x", ["variant"], [hang, error], ["not confirmed"]
    )
    m.rows_key, m.extra = "variants", {"confirmed": False}
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "compare-x"
    write_matrix(m, out)
    data = json.loads((out / "compare.json").read_text())
    assert data["mode"] == "compare" and data["confirmed"] is False
    assert [r["kind"] for r in data["variants"]] == ["hang", "error"]
    assert data["variants"][0]["location"] == "env_start"
    assert data["directory"] == str(out) and data["conclusion"] == ["not confirmed"]
    table = (out / "compare.md").read_text().splitlines()
    header = "| variant | verdict | mechanism | location | cause | epochs | failed checks | why"
    assert header + " | report |" in table
    assert any(ln.startswith("| fixed | error |") and "\\|" in ln for ln in table), table
    page = (out / "index.html").read_text()
    assert page.count('href="../runs/run-1/report.html"') == 2  # the badge and the link
    assert "patch &lt;x&gt;" in page and "openmp-after-fork" in page
    text = summary.read_text()
    assert text.startswith("### harness compare x\n\nnot confirmed\n") and header in text
    # outside Actions the same table writes no summary
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert not github.publish_table(m.title, m.table(), m.conclusion)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_knobs_judged_on_repeated_cells(tmp_path: Path, cache_env: dict[str, str]) -> None:
    """2 × 2 cells, 4 runs each, 2 at once: the variant changes the outcome (hang 8/8 against
    pass 8/8 is separated), OMP_WAIT_POLICY is ruled out (every run of every value alike)."""
    res = harness(
        "sweep",
        "breakout",
        "--set",
        "vec.num_buffers=2",
        "--env",
        "OMP_WAIT_POLICY=active,passive",
        "--variants",
        "stock,fixed",
        "--repeat",
        "4",
        "--jobs",
        "2",
        # the fixed runs' first frame came 4.5 s in on a loaded CI machine (the active OMP
        # waiters of two runs at once beside the suite): 8 s leaves it room, while the stock
        # runs still end at their startup window
        "--startup",
        "8",
        "--stall",
        "4",
        "--steps",
        "262144",
        "--report-dir",
        str(tmp_path),
        "--json",
        report_root=tmp_path,
        env=cache_env,
        timeout=580,
    )
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    cells = data["cells"]
    assert len(cells) == 4
    for c in cells:
        want = "hang" if c["variant"] == "stock" else "pass"
        assert (c["kind"], c["runs"], c["kinds"]) == (want, 4, {want: 4}), c
        aggregate = json.loads(Path(c["report_dir"], "repeat.json").read_text())
        assert aggregate["runs"] == 4 and len(aggregate["rows"]) == 4
        first = Path(aggregate["rows"][0]["report_dir"], "report.json")
        argv = json.loads(first.read_text())["command"]["argv"]
        assert "--vec.num_buffers=2" in argv
    # one build per distinct build key: two variants, two keys, every run a cache hit
    assert data["distinct_build_keys"] == 2
    assert all(c["cache_hit"] for c in cells)
    assert (
        data["conclusion"][0]
        == "--vec.num_buffers: not judged (one value ran: 2 → hang 8/16, pass 8/16)"
    )
    assert data["conclusion"][1].startswith("OMP_WAIT_POLICY is ruled out")
    assert data["conclusion"][2].startswith("variant changes the outcome (stock → hang 8/8")
    folder = Path(data["directory"])
    assert (folder / "sweep.md").is_file() and (folder / "sweep.json").is_file()
