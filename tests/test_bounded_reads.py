"""Bounded reads of saved reports (issue 17, "Evidence is read unbounded"): a report folder is
input like any other. Each hostile report below is real on disk (a link to /dev/zero, a FIFO,
10 000 nested arrays, a report from a future harness, a verdict kind no harness knows,
Infinity limits, values of the wrong type) and ends as one line with the USAGE exit code,
fast, through the library and through `harness check` / `harness report`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline import saved
from harness.pipeline.options import CheckOptions
from harness.report import load, reading, store
from tests.harness_cli import HarnessResult, harness

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report folder written by a real `harness watch` of a short program."""
    root = tmp_path_factory.mktemp("real")
    res = harness("watch", "--", sys.executable, "-c", "print('epoch 1')", report_root=root)
    assert res.code == 0, res.stderr
    return res.folder


@pytest.fixture
def report(real_report: Path, tmp_path: Path) -> Path:
    """A fresh copy of the real report for one test to damage."""
    copy = tmp_path / real_report.name
    shutil.copytree(real_report, copy)
    return copy


def _data(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "report.json").read_text())
    return data


def _write(folder: Path, data: dict[str, Any] | str) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    (folder / "report.json").write_text(text)


def _refused(folder: Path, *words: str) -> str:
    """load_report and load_status both refuse the report in one line, within 2 s."""
    messages = []
    for read in (load.load_report, store.load_status):
        start = time.monotonic()
        with pytest.raises(HarnessError) as info:
            read(folder)
        assert time.monotonic() - start < 5.0, read
        message = info.value.message
        assert info.value.exit_code == USAGE and "\n" not in message, message
        for word in words:
            assert word in message, message
        messages.append(message)
    return messages[0]


def _one_line_usage(res: HarnessResult, *words: str) -> None:
    assert res.code == USAGE, (res.code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word in lines[0], lines[0]


def _pin_evidence_to_dev_zero(folder: Path) -> None:
    (folder / "evidence").mkdir(exist_ok=True)
    (folder / "evidence" / "pin.json").symlink_to("/dev/zero")
    data = _data(folder)
    data["evidence"] = {"pin": "evidence/pin.json"}
    _write(folder, data)


# ---------------------------------------------------------------- files that are not files


def test_the_real_report_reads(report: Path) -> None:
    assert load.load_report(report).kind == "pass"
    assert store.load_status(report).status == "complete"


def test_report_json_linked_to_dev_zero(report: Path) -> None:
    (report / "report.json").unlink()
    (report / "report.json").symlink_to("/dev/zero")
    _refused(report, "report.json", "refused")


def test_report_json_is_a_fifo(report: Path) -> None:
    (report / "report.json").unlink()
    os.mkfifo(report / "report.json")
    _refused(report, "not a regular file")


def test_report_json_is_a_folder(report: Path) -> None:
    (report / "report.json").unlink()
    (report / "report.json").mkdir()
    with pytest.raises(HarnessError) as info:
        load.load_report(report / "report.json")
    assert info.value.exit_code == USAGE


def test_report_json_linked_out_of_its_folder(report: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    shutil.move(report / "report.json", outside)
    (report / "report.json").symlink_to(outside)
    _refused(report, "symlink leads out")


def test_pin_evidence_linked_to_dev_zero_is_read_bounded(report: Path) -> None:
    """The evidence reader itself refuses the link (out of the folder, not a regular file)."""
    _pin_evidence_to_dev_zero(report)
    start = time.monotonic()
    with pytest.raises(HarnessError) as info:
        reading.read_json(report, "evidence/pin.json", "unreadable pin evidence")
    assert time.monotonic() - start < 5.0 and "\n" not in info.value.message


def test_evidence_over_the_cap_is_refused(report: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (report / "evidence").mkdir(exist_ok=True)
    (report / "evidence" / "pin.json").write_text(json.dumps({"x": "y" * 200}))
    monkeypatch.setattr(reading, "EVIDENCE_LIMIT", 100)
    with pytest.raises(HarnessError, match="larger than 100 bytes"):
        reading.read_json(report, "evidence/pin.json", "pin evidence", reading.EVIDENCE_LIMIT)
    with pytest.raises(HarnessError, match="larger than 100 bytes"):
        saved.check_evidence_tree(report)


def test_evidence_tree_refuses_fifos_and_links_out(report: Path, tmp_path: Path) -> None:
    evidence = report / "evidence"
    (evidence / "config").mkdir(parents=True)
    (evidence / "config" / "a.ini").write_text("[x]\n")
    saved.check_evidence_tree(report)  # regular files inside: fine
    os.mkfifo(evidence / "config" / "b.ini")
    with pytest.raises(HarnessError, match="not a regular file"):
        saved.check_evidence_tree(report)
    (evidence / "config" / "b.ini").unlink()
    (tmp_path / "secret").write_text("s")
    (evidence / "run").symlink_to(tmp_path)  # a folder link out of the report
    with pytest.raises(HarnessError, match="symlink leads out"):
        saved.check_evidence_tree(report)


def test_a_big_output_log_is_read_to_its_tail(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (report / "output.log").write_bytes(b"x" * 5000 + b"\nepoch 1\n")
    monkeypatch.setattr(saved, "OUTPUT_LOG_LIMIT", 1000)
    text, note = saved.read_log(report / "output.log", required=False)
    assert len(text) == 1000 and text.endswith("epoch 1\n")
    assert note is not None and "5009 bytes" in note
    (report / "output.log").unlink()
    (report / "output.log").symlink_to("/dev/zero")
    with pytest.raises(HarnessError, match=r"output\.log"):
        saved.read_log(report / "output.log", required=False)


def test_a_raw_log_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "output.log"
    os.mkfifo(fifo)
    opts = CheckOptions(fifo, "breakout", None, None, None)
    start = time.monotonic()
    with pytest.raises(HarnessError, match="not a regular file"):
        saved.check_saved(opts)
    assert time.monotonic() - start < 5.0


# ---------------------------------------------------------------- JSON that is not a report


def test_ten_thousand_nested_arrays(report: Path) -> None:
    _write(report, "[" * 10_000 + "]" * 10_000)
    _refused(report, "nested deeper than")


def test_deep_but_parseable_nesting(report: Path) -> None:
    data = _data(report)
    deep: Any = "bottom"
    for _ in range(500):  # Python's json parses it; a renderer walking it could recurse
        deep = [deep]
    data["notes"] = deep
    _write(report, data)
    _refused(report, f"nested deeper than {reading.MAX_DEPTH}")


def test_a_newer_schema_version_is_refused(report: Path) -> None:
    data = _data(report)
    data["schema_version"] = 99
    _write(report, data)
    _refused(report, "report.json schema_version 99 is newer than this harness reads (1, 2)")
    data["schema_version"] = "1"
    _write(report, data)
    _refused(report, "schema_version")


def test_an_unknown_verdict_kind_is_refused(report: Path) -> None:
    data = _data(report)
    data["verdict"]["kind"] = "quantum-hang"
    _write(report, data)
    _refused(report, "verdict.kind", '"quantum-hang" is not one of pass, check-failed, hang')


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ('"wall_s": Infinity', ("limits.wall_s", "not a finite number")),
        ('"wall_s": 1e999', ("limits.wall_s", "not a finite number")),
        ('"wall_s": NaN', ("limits.wall_s", "not a finite number")),
        ('"wall_s": "600"', ("limits.wall_s", "expected a number, found a string")),
        ('"wall_s": null', ("limits.wall_s", "null")),
        ('"wall_s": true', ("limits.wall_s", "expected a number, found a boolean")),
    ],
)
def test_bad_limits(report: Path, edit: str, words: tuple[str, ...]) -> None:
    text = (report / "report.json").read_text()
    assert '"wall_s": 600.0' in text
    _write(report, text.replace('"wall_s": 600.0', edit))
    _refused(report, *words)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("checks", 5, ("checks", "expected an array, found a number")),
        ("checks", [{"name": "x", "status": "maybe"}], ("checks[0].status", "maybe")),
        ("status", "exploded", ("status", "is not one of")),
        ("progress", None, ("progress", "null where a value is required")),
        ("timings", {"run_s": "fast"}, ("timings.run_s", "expected a number")),
        ("exit", {"returncode": 1.5}, ("exit.returncode", "expected an integer")),
        ("harness_argv", "harness run", ("harness_argv", "expected an array")),
    ],
)
def test_wrong_types_name_their_key(
    report: Path, key: str, value: object, words: tuple[str, ...]
) -> None:
    data = _data(report)
    data[key] = value
    _write(report, data)
    _refused(report, *words)


def test_metrics_may_hold_what_the_trainer_printed(report: Path) -> None:
    """Free-form data is kept as written: a trainer's `loss inf` is a value, not damage."""
    data = _data(report)
    data["progress"]["last_metrics"] = {"loss": float("inf"), "SPS": 10.0}
    _write(report, json.dumps(data))  # json writes Infinity
    assert load.load_report(report).progress.last_metrics["loss"] == float("inf")


# ---------------------------------------------------------------- through the CLI


def test_check_with_pin_evidence_linked_to_dev_zero(report: Path, tmp_path: Path) -> None:
    _pin_evidence_to_dev_zero(report)
    res = harness("check", str(report), report_root=tmp_path)
    _one_line_usage(res, "evidence")
    assert res.elapsed < 20  # it grew to 8 GB in 11 s before; now it reads nothing


def test_report_command_on_report_json_linked_to_dev_zero(report: Path, tmp_path: Path) -> None:
    (report / "report.json").unlink()
    (report / "report.json").symlink_to("/dev/zero")
    _one_line_usage(harness("report", str(report), report_root=tmp_path), "report.json")
    _one_line_usage(harness("check", str(report), report_root=tmp_path), "report.json")


def test_check_refuses_a_future_report(report: Path, tmp_path: Path) -> None:
    data = _data(report)
    data["schema_version"] = 99
    _write(report, data)
    res = harness("check", str(report), "--scenario", "breakout", report_root=tmp_path)
    _one_line_usage(res, "schema_version 99 is newer than this harness reads (1, 2)")


def test_check_refuses_a_quantum_hang(report: Path, tmp_path: Path) -> None:
    data = _data(report)
    data["verdict"]["kind"] = "quantum-hang"
    _write(report, data)
    res = harness("check", str(report), "--scenario", "breakout", report_root=tmp_path)
    _one_line_usage(res, "verdict.kind")


def test_report_command_on_deep_json_and_inf_limits(report: Path, tmp_path: Path) -> None:
    _write(report, "[" * 10_000 + "]" * 10_000)
    _one_line_usage(harness("report", str(report), report_root=tmp_path), "nested deeper")
    _write(report, '{"schema_version": 1, "limits": {"wall_s": Infinity}}')
    _one_line_usage(harness("report", str(report), report_root=tmp_path), "limits.wall_s")


# ---------------------------------------------------------------- key paths as JSON has them

HANG = Path(__file__).resolve().parent / "data" / "reports" / "f017656-watch-python-deadlock.json"


def _hang_with(tmp_path: Path, edit: Any) -> Path:
    """A real hang report (tests/data/reports/) with one edit, in a folder of its own."""
    data = json.loads(HANG.read_text())
    edit(data)
    folder = tmp_path / "hang"
    folder.mkdir()
    _write(folder, data)
    return folder


def _first_inlined(data: dict[str, Any]) -> dict[str, Any]:
    frames = (f for s in data["samples"]["stacks"] for f in s["frames"])
    found: dict[str, Any] = next(f for f in frames if "inline" in f)
    return found


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        # an inlined frame is read as one by its keys: the path names the frame, never the
        # union member pydantic tried ("…frames[0].inlined.inline")
        (lambda d: _first_inlined(d).update(inline=None), ".inline: null where a value is"),
        (lambda d: _first_inlined(d).update(line="12"), ".line: expected an integer, found a"),
        (lambda d: d["samples"]["stacks"][0]["frames"].insert(0, "main"), "].frames[0]: expec"),
        (lambda d: d["samples"]["stacks"][0]["frames"][0].pop("function"), ".function: a req"),
        (
            lambda d: d["samples"]["timeline"][0]["threads"][0].pop(),
            ".threads[0][5]: the array is too short",
        ),
    ],
)
def test_a_wrong_value_is_named_by_its_json_path(tmp_path: Path, edit: Any, words: str) -> None:
    message = _refused(_hang_with(tmp_path, edit), words)
    assert "inlined" not in message and ".frame." not in message, message


def test_a_command_line_byte_that_is_not_utf8_reads_back(tmp_path: Path) -> None:
    """Python names an argument's undecodable byte by a lone surrogate (b'caf\\xe9' is
    'caf\\udce9'), which report.json keeps as `\\udce9`; a JSON parser other than Python's
    refuses it, and `harness report` and `harness check` refused the harness's own report."""
    word = os.fsdecode(b"caf\xe9")
    res = harness("watch", "--", sys.executable, "-c", "print(1)", word, report_root=tmp_path)
    assert res.code == 0, res.stderr
    assert "\\udce9" in (res.folder / "report.json").read_text()
    report = load.load_report(res.folder)
    assert report.command is not None and report.command.argv[-1] == word
    assert word in report.harness_argv
    shown = harness("report", str(res.folder), report_root=tmp_path)
    assert shown.code == 0, shown.stderr
