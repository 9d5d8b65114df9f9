"""Fuzzing the report loader (issue 17, Deliver 9): whatever report.json holds, loading it
gives a `Report` or one `HarnessError` line with the USAGE exit code, never another
exception; and a Report it gives renders (terminal summary, report.md, junit.xml) without
one either.

Three sources of input: arbitrary JSON values; a realistic report (a verdict with causes,
checks, limits, metrics, and the samples of a real run, tests/data/samples/lock-cycle.json)
with one key path deleted or replaced by an arbitrary value; and the bytes of that report
cut or with bytes replaced. Example counts are set below (about 10 s in all)."""

from __future__ import annotations

import atexit
import copy
import functools
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.analysis.causes import Cause
from harness.analysis.checks import CheckResult
from harness.analysis.classify import Verdict
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.report import load
from harness.report.console import print_summary
from harness.report.junit import render_junit
from harness.report.markdown import render_report
from harness.report.model import CommandInfo, Report
from harness.vocab import CheckStatus, Confidence, Mechanism, RunMode, RunStatus, Stage, Trigger
from harness.watch.watchdog import Limits

SAMPLES = Path(__file__).resolve().parent / "data" / "samples" / "lock-cycle.json"
FOLDER = Path(tempfile.mkdtemp(prefix="fuzz-report-"))  # report files written per example
atexit.register(functools.partial(shutil.rmtree, FOLDER, ignore_errors=True))

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def base_report() -> dict[str, Any]:
    """A report.json as a hang run writes it, samples included."""
    r = Report("20260101-000000-breakout-abcd", FOLDER, ["harness", "run", "breakout"], RunMode.RUN)
    r.env, r.status, r.stage, r.trigger = "breakout", RunStatus.COMPLETE, Stage.DONE, Trigger.STALL
    r.command = CommandInfo(["./train", "--x=1"], "/tmp/w", {"OMP_NUM_THREADS": "1"}, steps=100)
    r.limits = Limits(wall_s=600.0, startup_s=60.0, stall_s=30.0, quiescent_s=5.0)
    r.progress.last_metrics = {"epoch": 3.0, "SPS": 1.5e6}
    r.progress.output_tail = ["epoch 3", "\x1b[2J<b>x</b>"]
    r.verdict = Verdict(
        Kind.HANG,
        summary="hang (deadlock) in env_start",
        mechanism=Mechanism.DEADLOCK,
        location="env_start",
        location_frames=["main", "env_start"],
        evidence=["every thread blocked", "output: epoch 3"],
        causes=[Cause("lock-cycle", "two threads wait", Confidence.HIGH, ["a"], ["b"], "x")],
    )
    r.checks = [CheckResult("sps", CheckStatus.FAIL, 1.0, ">= 2", "too slow")]
    r.notes = ["a note"]
    data = r.to_json()
    data["samples"] = json.loads(SAMPLES.read_text())
    return data


BASE = base_report()


def key_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a JSON value (object keys and list indexes), parents first."""
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += key_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):  # a few items of each list
            out += key_paths(v, (*prefix, i))
    return out


PATHS = key_paths(BASE)


def outcome(read: Any) -> Report | None:
    """Run one load: a Report (rendered, to find values that load but break a reader), or
    None for a refusal, which must be one line with the USAGE code."""
    try:
        report = read()
    except HarnessError as exc:
        assert exc.exit_code == USAGE and "\n" not in exc.message and exc.message, exc.message
        return None
    assert isinstance(report, Report)
    print_summary(report, io.StringIO())
    render_report(report)
    render_junit(report)
    return report


def test_the_base_report_loads() -> None:
    report = outcome(lambda: load.report_from_json(copy.deepcopy(BASE), FOLDER))
    assert report is not None and report.verdict is not None and report.samples is not None
    assert report.verdict.kind is Kind.HANG and report.samples.lock_cycles
    assert len(PATHS) > 300  # the mutations below reach deep into the samples


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_any_json_value(value: Any) -> None:
    path = FOLDER / "report.json"
    path.write_text(json.dumps(value))
    outcome(lambda: load.load_report(path))
    if isinstance(value, dict):
        outcome(lambda: load.report_from_json(value, FOLDER))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), st.one_of(st.just("<delete>"), JSON), st.booleans())
def test_one_key_of_a_real_report_changed(path: tuple[Any, ...], value: Any, top: bool) -> None:
    data = copy.deepcopy(BASE)
    parent: Any = data
    for part in path[:-1]:
        parent = parent[part]
    if value == "<delete>":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    if top:  # the whole way: bytes on disk through load_report
        (FOLDER / "report.json").write_text(json.dumps(data))
        outcome(lambda: load.load_report(FOLDER))
    else:
        outcome(lambda: load.report_from_json(data, FOLDER))


BASE_BYTES = json.dumps(BASE).encode()


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=len(BASE_BYTES)),
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=len(BASE_BYTES) - 1), st.binary(max_size=3)),
        max_size=4,
    ),
)
def test_report_bytes_cut_or_damaged(cut: int, edits: list[tuple[int, bytes]]) -> None:
    raw = bytearray(BASE_BYTES[:cut] if cut % 3 == 0 else BASE_BYTES)
    for at, data in edits:
        raw[at : at + len(data)] = data
    (FOLDER / "report.json").write_bytes(bytes(raw))
    outcome(lambda: load.load_report(FOLDER))
