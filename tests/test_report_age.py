"""Reports written by older harnesses keep loading (report.load's tolerance of age): real
report.json files captured at two older commits (tests/data/README.md, "Reports of older
harnesses") read back with their verdicts, render as today's reports do, and write the same
JSON again once loaded."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.report.console import print_summary
from harness.report.html import render_html
from harness.report.junit import render_junit
from harness.report.load import load_report
from harness.report.markdown import render_report
from harness.report.model import SCHEMA_VERSION
from harness.sampling.model import InlinedFrame
from harness.vocab import Mechanism, RunMode, Trigger

DATA = Path(__file__).resolve().parent / "data" / "reports"

# file → (mode, kind, mechanism, location, cause ids, trigger), as the capture's console said
OLD = {
    "eccb6f4-run-breakout-hang": (
        RunMode.RUN,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "env_start",
        [],
        Trigger.STARTUP,
    ),
    "eccb6f4-watch-python-deadlock": (
        RunMode.WATCH,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "one",
        [],
        Trigger.STALL,
    ),
    "33e304c-run-breakout-hang": (
        RunMode.RUN,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "env_start",
        [],
        Trigger.STARTUP,
    ),
    "33e304c-run-breakout-fixed-pass": (RunMode.RUN, Kind.PASS, None, None, [], Trigger.EXIT),
    "33e304c-watch-python-deadlock": (
        RunMode.WATCH,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "one",
        [],
        Trigger.STALL,
    ),
    "f017656-run-breakout-hang": (
        RunMode.RUN,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "env_start",
        ["openmp-after-fork"],
        Trigger.CLOSED,
    ),
    "f017656-watch-python-deadlock": (
        RunMode.WATCH,
        Kind.HANG,
        Mechanism.DEADLOCK,
        "one",
        ["python-locks"],
        Trigger.CLOSED,
    ),
}


@pytest.fixture(params=sorted(OLD))
def old(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """A report folder holding one captured report.json."""
    folder = tmp_path / request.param
    folder.mkdir()
    shutil.copy(DATA / f"{request.param}.json", folder / "report.json")
    return request.param, folder


def test_the_captures_are_older_than_this_harness() -> None:
    """They test age only while they are older: schema 1, from harness 0.1.0."""
    assert sorted(p.stem for p in DATA.glob("*.json")) == sorted(OLD)
    for name in OLD:
        data = json.loads((DATA / f"{name}.json").read_text())
        assert data["schema_version"] == 1 < SCHEMA_VERSION, name


def test_an_old_report_loads_with_its_verdict(old: tuple[str, Path]) -> None:
    name, folder = old
    mode, kind, mechanism, location, causes, trigger = OLD[name]
    report = load_report(folder)
    assert report.directory == folder and report.mode is mode and report.trigger is trigger
    assert report.verdict is not None and report.verdict.kind is kind
    assert report.verdict.mechanism is mechanism and report.verdict.location == location
    assert [c.id for c in report.verdict.causes] == causes
    assert report.limits is not None and report.limits.wall_s > 0
    if kind is Kind.HANG:  # its samples, typed to the frame
        assert report.samples is not None and report.samples.stacks
        frames = [f for s in report.samples.stacks for f in s.frames]
        assert frames and all(f.function for f in frames)
        raw = json.loads((folder / "report.json").read_text())
        inlined = sum(
            "inline" in f for s in raw["samples"]["stacks"] for f in s["frames"]
        )  # an inlined frame is read as one, and only then
        assert sum(isinstance(f, InlinedFrame) for f in frames) == inlined


def test_an_old_report_renders_and_writes_the_same_again(
    old: tuple[str, Path], tmp_path: Path
) -> None:
    name, folder = old
    report = load_report(folder)
    out = io.StringIO()
    print_summary(report, out)
    location = OLD[name][3]
    assert report.verdict is not None and report.verdict.kind in out.getvalue()
    assert location is None or location in out.getvalue()
    assert report.verdict.summary in render_report(report)
    assert "<html" in render_html(report) and render_junit(report)
    again = tmp_path / "again"
    again.mkdir()
    written = report.to_json()
    (again / "report.json").write_text(json.dumps(written))
    reread = load_report(again).to_json()
    for data in (written, reread):
        data.pop("artifacts")
    assert json.loads(json.dumps(reread)) == json.loads(json.dumps(written))
