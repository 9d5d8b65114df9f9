"""`harness matrix` (a sweep or a repeat as a CI job matrix) and `harness collect` (run
report folders made elsewhere told together): runs made by separate `harness watch`
processes, with no plan, give the same aggregate as the local `--repeat`, and two cells the
same sweep conclusion; the plan's commands are the sweep's own `harness run`s; the reusable
workflow validates; links out of a folder and folders without a report are refused with
one line."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import build_parser
from harness.errors import HarnessError
from harness.pipeline import collect as collect_mod
from harness.pipeline.collect import UNSET, collect, find_reports, tell
from harness.pipeline.fanout import MAX_JOBS, plan_matrix
from harness.pipeline.options import RunOptions
from harness.pipeline.repeat import Repeat, run_argv
from harness.pipeline.sweep import Knob, cells_for, conclude, parse_knobs
from harness.report.load import load_report
from harness.report.repeat import combine
from harness.report.runs import row_from_report
from harness.vocab import AxisKind, RunMode
from tests.facts import require_tool
from tests.harness_cli import ROOT, harness, watch_cmd, watch_opts

pytestmark = pytest.mark.timeout(300)
# a deadlocked C program is quiescent at once: a verdict about a second after its start
FAST = watch_opts(startup=5, stall=5, quiescent=1, timeout=30, quiet=True)
# what must be the same between a collected and a local aggregate (not where the runs are)
SAME_KEYS = ("runs", "ran", "counts", "hang_rate", "hang_rate_ci95", "failure_rate", "summary")


def group_keys(data: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    return [(g["kind"], g["location"], g["cause"], g["count"]) for g in data["groups"]]


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


@dataclass
class Runs:
    separate: list[Path]  # three folders, each one `harness watch` process's report
    local: dict[str, Any]  # repeat.json of `harness watch --repeat 3` of the same program
    cells: dict[str, Path]  # X value → a local `--repeat 2` folder of the sh wrapper
    exe: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, c_program: Callable[[str], Path]) -> Runs:
    base = tmp_path_factory.mktemp("runs")
    exe = c_program("mutex_deadlock")
    separate = []
    for n in range(3):  # three separate processes, no plan between them
        root = base / f"job{n}"
        res = watch_cmd(root, str(exe), opts=FAST)
        assert res.code == 2, res.stderr
        separate.append(root)
    res = watch_cmd(base / "local", str(exe), opts=("--repeat", "3", *FAST))
    assert res.code == 2, res.stderr
    local = json.loads(only(list((base / "local").glob("*/repeat.json"))).read_text())
    # two cells: the same command, whose environment decides whether it deadlocks
    script = f'if [ "$X" = 1 ]; then exec {shlex.quote(str(exe))}; fi'
    cells = {}
    for x in ("1", "2"):
        root = base / "cells" / x
        opts = ("--repeat", "2", "--env", f"X={x}", *FAST)
        res = watch_cmd(root, "sh", "-c", script, opts=opts)
        assert res.code == (2 if x == "1" else 0), res.stderr
        cells[x] = only([p.parent for p in root.glob("*/repeat.json")])
    return Runs(separate, local, cells, exe)


# ------------------------------------------------------------------ collect


@pytest.mark.slow
def test_separate_runs_give_the_local_repeat_aggregate(runs: Runs, tmp_path: Path) -> None:
    found = collect(runs.separate)
    assert (found.runs, len(found.cells), found.knobs) == (3, 1, [])
    m, code = tell(found, tmp_path / "out")
    assert code == 2  # the hang's exit code, as `watch --repeat 3` exits
    data = json.loads((tmp_path / "out" / "repeat.json").read_text())
    assert data["mode"] == "repeat" and data["counts"] == {"hang": 3}
    assert {k: data[k] for k in SAME_KEYS} == {k: runs.local[k] for k in SAME_KEYS}
    assert (
        group_keys(data) == group_keys(runs.local) == [("hang", "transfer_a_to_b", "lock-cycle", 3)]
    )
    assert data == m.to_json(tmp_path / "out")
    # each row is a run's own report, numbered as --repeat numbers them
    assert [r["values"] for r in data["rows"]] == [{"run": "1"}, {"run": "2"}, {"run": "3"}]
    assert {str(Path(r["report_dir"]).parent) for r in data["rows"]} == set(map(str, runs.separate))
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count(">report</a>") == 3 and "hang 3/3" in page


@pytest.mark.slow
def test_two_cells_are_told_as_a_sweep(
    runs: Runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # as in the collect job of the workflow
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    found = collect([runs.cells["1"].parent.parent])  # both local repeats, under one DIR
    assert found.knobs == [Knob(AxisKind.ENV, "X", ("1", "2"))]
    m, code = tell(found, out)
    # the step summary: the sweep's table and conclusion, once (a cell's own is not published)
    published = summary.read_text()
    assert published.count("### harness collect sh: 2 cells, 4 run(s)") == 1, published
    assert "| X | verdict |" in published and "X is unsettled" in published
    assert code == 0  # every cell ran, whatever it found: a sweep's exit code
    data = json.loads((out / "sweep.json").read_text())
    assert (data["mode"], data["axes"]) == ("sweep", ["X"])
    cells = data["cells"]
    assert [(c["values"], c["runs"], c["kinds"]) for c in cells] == [
        ({"X": "1"}, 2, {"hang": 2}),
        ({"X": "2"}, 2, {"pass": 2}),
    ]
    # the conclusion a sweep draws from these cells' runs, each cell's runs combined
    expected_rows = []
    for x, folder in runs.cells.items():
        rows = []
        for n, report_json in enumerate(sorted(folder.glob("runs/*/*/report.json")), 1):
            report = load_report(report_json.parent)
            code_n = report.verdict.exit_code if report.verdict else None
            rows.append(row_from_report(report, code_n, {"X": x, "run": str(n)}))
        expected_rows.append(combine(rows, {"X": x}, "", folder))
    expected = conclude(found.knobs, expected_rows)
    assert data["conclusion"] == m.conclusion == expected
    assert expected[0].startswith("X "), expected
    # each cell's own aggregate is the local `--repeat 2` of that cell
    for i, (x, folder) in enumerate(runs.cells.items()):
        mine = json.loads((out / "cells" / f"{i:03d}" / "repeat.json").read_text())
        local = json.loads((folder / "repeat.json").read_text())
        assert {k: mine[k] for k in SAME_KEYS} == {k: local[k] for k in SAME_KEYS}, x
        assert group_keys(mine) == group_keys(local)
    assert "X" in (out / "index.html").read_text()


@pytest.mark.slow
def test_refusals_are_one_line(runs: Runs, tmp_path: Path) -> None:
    """A link out of a DIR, a folder with no report, a missing DIR, a report of a newer
    schema, a report.json that is a FIFO or a link, and too many reports: one line each,
    the usage exit code, nothing read beyond the link."""
    real = only([p.parent for p in runs.separate[0].glob("*/report.json")])
    outside = tmp_path / "outside"
    shutil.copytree(real, outside / "run")
    d = tmp_path / "d"
    shutil.copytree(real, d / "a" / "run")
    (d / "b").mkdir()
    (d / "b" / "out").symlink_to(outside)  # a real symlink out of the folder
    cases: list[tuple[list[Path], str]] = [([d], "a symbolic link out of")]
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "sub" / "notes.txt").write_text("not a report\n")
    cases += [([empty], "no run report under"), ([tmp_path / "nope"], "no such folder")]
    newer = tmp_path / "newer"
    (newer / "run").mkdir(parents=True)
    data = json.loads((real / "report.json").read_text())
    (newer / "run" / "report.json").write_text(json.dumps({**data, "schema_version": 999}))
    cases.append(([newer], "schema_version 999 is newer than this harness reads"))
    fifo = tmp_path / "fifo"
    (fifo / "run").mkdir(parents=True)
    os.mkfifo(fifo / "run" / "report.json")  # would block a reader that opened it
    cases.append(([fifo], "not a regular file"))
    linked = tmp_path / "linked"
    shutil.copytree(real, linked / "run")
    (linked / "run" / "report.json").rename(linked / "run" / "saved.json")
    (linked / "run" / "report.json").symlink_to("saved.json")
    cases.append(([linked], "report.json: a symbolic link"))
    # runs of two different programs are no repeats of one cell (the command is no knob)
    cases.append(
        ([runs.separate[0], runs.cells["1"]], "the runs are not of one plan: their command")
    )
    for dirs, text in cases:
        with pytest.raises(HarnessError) as info:
            collect(dirs)
        message = info.value.message
        assert text in message and "\n" not in message and info.value.exit_code == 5, message
    # a link inside the folder is not followed: its target is counted once, as itself
    (d / "b" / "out").unlink()
    (d / "b" / "again").symlink_to(d / "a")
    assert find_reports([d]) == [d / "a" / "run"]


def test_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deeper than MAX_DEPTH is not looked at; more reports than MAX_REPORTS is refused."""
    deep = tmp_path / "deep"
    folder = deep.joinpath(*[f"l{i}" for i in range(collect_mod.MAX_DEPTH + 1)])
    folder.mkdir(parents=True)
    (folder / "report.json").write_text("{}")
    (folder.parent / "report.json").write_text("{}")  # at MAX_DEPTH: found
    assert find_reports([deep]) == [folder.parent]
    many = tmp_path / "many"
    for n in range(3):
        (many / f"r{n}").mkdir(parents=True)
        (many / f"r{n}" / "report.json").write_text("{}")
    monkeypatch.setattr(collect_mod, "MAX_REPORTS", 2)
    with pytest.raises(HarnessError, match="more than 2 run reports under"):
        find_reports([many])


def test_coordinates_come_from_the_report(tmp_path: Path) -> None:
    """A run's cell from its report alone: variant, env overrides less the host profile's
    presets, --section.key=value arguments, the host profile."""
    from harness.execute.conditions import HostConditions
    from harness.report.model import CommandInfo, Report, VariantInfo

    report = Report("r", tmp_path, [], RunMode.RUN, env="breakout")
    report.variant = VariantInfo("fixed")
    report.command = CommandInfo(
        ["./puffer", "train", "breakout", "--vec.num_buffers=2", "--train.total-timesteps=9"],
        ".",
        env={"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1"},
    )
    report.conditions = HostConditions(env={"OMP_NUM_THREADS": "1"}, profile="container-1cpu")
    coords = collect_mod.coordinates(report)
    assert coords == {
        (AxisKind.ENV, "OMP_WAIT_POLICY"): "passive",
        (AxisKind.SET, "vec.num_buffers"): "2",
        (AxisKind.SET, "train.total-timesteps"): "9",
        (AxisKind.VARIANT, "variant"): "fixed",
        (AxisKind.HOST, "host"): "container-1cpu",
    }
    report.conditions = None
    assert collect_mod.coordinates(report)[(AxisKind.HOST, "host")] == UNSET


# ------------------------------------------------------------------ matrix


def test_matrix_plan_is_the_sweeps_runs() -> None:
    base = RunOptions(env="breakout", timeout_s=60.0)
    knobs = parse_knobs([], ["OMP_WAIT_POLICY=active,passive"], "stock,fixed")
    fan = plan_matrix(base, knobs, Repeat(3), Path("reports"))
    data = json.loads(json.dumps(fan.to_json()))
    entries = data["include"]
    assert len(entries) == 2 * 2 * 3 == len({e["id"] for e in entries})
    cells = cells_for(knobs, base)
    for e in entries:
        cell = cells[int(e["id"][1:4])]
        assert e["cell"] == cell.values and e["run"] == int(e["id"][-2:])
        argv = shlex.split(e["command"])
        folder = Path("reports") / e["id"]
        assert argv[argv.index("--report-dir") + 1] == str(folder) == e["report_dir"]
        # the same translation a local sweep gives its child for this cell and folder
        child = run_argv(base, cell.variant, cell.trainer_env, cell.trainer_args, cell.host)
        assert argv == ["harness", *child(folder)[3:]]
        parsed = build_parser().parse_args(argv[1:])  # the harness's own `run` takes it
        assert (parsed.command, parsed.variant, parsed.report_dir) == ("run", cell.variant, folder)
        assert e["timeout_minutes"] == 3  # 60 s and the child margin of 120 s
    assert [e["id"] for e in entries[:4]] == ["c000-r01", "c000-r02", "c000-r03", "c001-r01"]


def test_matrix_refusals_are_one_line() -> None:
    base = RunOptions(env="breakout")
    knobs = parse_knobs([], [], "stock,fixed")
    cases = [
        (Repeat(129), "the matrix would have 258 entries (2 cells × 129 runs)"),
        (Repeat(2, until_fail=True), "--until-fail and --repeat auto cannot stop the others"),
        (Repeat(2, jobs=2), "--jobs: in a matrix every run is its own job"),
    ]
    for plan, text in cases:
        with pytest.raises(HarnessError) as info:
            plan_matrix(base, knobs, plan, Path("reports"))
        assert text in info.value.message and "\n" not in info.value.message
        assert info.value.exit_code == 5
    assert MAX_JOBS == 256
    fan = plan_matrix(base, knobs, Repeat(128), Path("reports"))  # 256: at the limit
    assert len(fan.jobs) == 256
    with pytest.raises(HarnessError, match="unknown variant 'nope'"):
        plan_matrix(base, parse_knobs([], [], "stock,nope"), Repeat(1), Path("r"))


# ------------------------------------------------------------------ the workflow

WORKFLOW = ROOT / ".github" / "workflows" / "matrix.yml"


def test_the_reusable_workflow_validates_and_reads_what_the_plan_writes() -> None:
    tool = require_tool("check-jsonschema", why="validate the workflow against GitHub's schema")
    res = subprocess.run(
        [tool, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    flow = yaml.safe_load(WORKFLOW.read_text())
    call = flow[True]["workflow_call"]  # YAML 1.1 reads the key `on` as true
    assert {"env", "args", "max-parallel", "retention-days"} <= set(call["inputs"])
    jobs = flow["jobs"]
    assert list(jobs) == ["plan", "run", "collect"]
    assert jobs["run"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    plan_steps = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    collect_steps = " ".join(s.get("run", "") for s in jobs["collect"]["steps"])
    assert "harness matrix" in plan_steps and "harness collect artifacts" in collect_steps
    # every key of an entry the workflow reads is one the plan writes
    fan = plan_matrix(RunOptions(env="breakout"), [], Repeat(1), Path("reports"))
    expressions = re.findall(r"\$\{\{(.*?)\}\}", WORKFLOW.read_text())
    used = {k for e in expressions for k in re.findall(r"(?<![\w.])matrix\.(\w+)", e)}
    assert used and used <= set(fan.jobs[0].to_json()), used


# ------------------------------------------------------------------ the command line
# (these need `matrix` and `collect` registered in harness/cli/__init__.py)


def test_cli_matrix(tmp_path: Path) -> None:
    res = harness("matrix", "breakout", "--variants", "stock,fixed", "--repeat", "2",
                  report_root=tmp_path)  # fmt: skip
    assert res.code == 0, res.stderr
    assert len(res.stdout.splitlines()) == 1  # one line: fit for $GITHUB_OUTPUT
    entries = json.loads(res.stdout)["include"]
    assert [e["id"] for e in entries] == ["c000-r01", "c000-r02", "c001-r01", "c001-r02"]
    assert all(shlex.split(e["command"])[:2] == ["harness", "run"] for e in entries)
    assert "4 jobs: 2 cell(s) × 2 run(s) of breakout (axes: variant)" in res.stderr
    values = ",".join(str(n) for n in range(129))
    over = harness("matrix", "breakout", "--set", f"vec.x={values}", "--repeat", "2",
                   report_root=tmp_path)  # fmt: skip
    assert over.code == 5 and over.stdout == "", over.stderr
    (line,) = over.stderr.strip().splitlines()
    assert "would have 258 entries (129 cells × 2 runs)" in line and "256" in line
    assert not list(tmp_path.iterdir())  # a plan writes nothing


@pytest.mark.slow
def test_cli_collect(runs: Runs, tmp_path: Path) -> None:
    res = harness("collect", *map(str, runs.separate), "--report-dir", str(tmp_path / "r"),
                  "--json", report_root=tmp_path)  # fmt: skip
    assert res.code == 2, res.stderr
    data = json.loads(res.stdout)
    assert {k: data[k] for k in SAME_KEYS} == {k: runs.local[k] for k in SAME_KEYS}
    (folder,) = (tmp_path / "r").iterdir()
    assert folder.name.split("-")[2] == "collect" and (folder / "repeat.json").is_file()
    for args, text in [
        ([str(tmp_path / "nope")], "no such folder"),
        ([str(ROOT / "docs")], "no run report under"),
    ]:
        bad = harness("collect", *args, "--report-dir", str(tmp_path / "bad"),
                      report_root=tmp_path)  # fmt: skip
        (line,) = bad.stderr.strip().splitlines()
        assert bad.code == 5 and text in line, bad.stderr
        assert not [p for p in (tmp_path / "bad").iterdir() if p.is_dir()]
