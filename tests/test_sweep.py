"""`harness sweep`: the knob matrix on the replica, every cell a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.pipeline.sweep import Cell, Knob, conclude, parse_knobs
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


def test_conclusion_names_the_knob_that_matters() -> None:
    a, v = Knob("env", "A", ("1", "2")), Knob("variant", "variant", ("s", "f"))
    cells = [
        Cell(i, {"A": x, "variant": y}, y, {}, [], kind="hang" if y == "s" else "pass")
        for i, (x, y) in enumerate([("1", "s"), ("1", "f"), ("2", "s"), ("2", "f")])
    ]
    lines = conclude([a, v], cells)
    assert lines[0].startswith("A is ruled out")
    assert lines[1].startswith("variant changes the outcome")
    cells[2].kind = "pass"  # now A=2 turns the stock hang into a pass
    assert conclude([a, v], cells)[0].startswith("A changes the outcome")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_knobs_two_values_two_variants(tmp_path: Path, cache_env: dict[str, str]) -> None:
    res = harness(
        "sweep",
        "breakout",
        "--set",
        "vec.num_buffers=1,2",
        "--env",
        "OMP_WAIT_POLICY=active,passive",
        "--variants",
        "stock,fixed",
        "--startup",
        "4",
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
    assert len(cells) == 8
    for c in cells:
        want = "hang" if c["variant"] == "stock" else "pass"
        assert c["kind"] == want, c
        assert Path(c["report_dir"], "report.json").is_file()
        argv = json.loads(Path(c["report_dir"], "report.json").read_text())["command"]["argv"]
        assert f"--vec.num_buffers={c['values']['--vec.num_buffers']}" in argv
    # one build per distinct build key: two variants, two keys, every cell a cache hit
    assert data["distinct_build_keys"] == 2
    assert all(c["cache_hit"] for c in cells)
    assert data["conclusion"][0].startswith("--vec.num_buffers is ruled out")
    assert data["conclusion"][1].startswith("OMP_WAIT_POLICY is ruled out")
    assert data["conclusion"][2].startswith("variant changes the outcome")
    folder = Path(data["directory"])
    assert (folder / "sweep.md").is_file() and (folder / "sweep.json").is_file()
