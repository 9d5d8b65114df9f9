"""The output pump at any rate: output.log byte-identical to what the program wrote, the line
count exact, the parser reaching the newest frame however fast the output, memory bounded
(frames, tail) and a slow terminal never blocking the pump."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO, cast

import pytest

from harness import dashboard
from harness.execute import output
from harness.execute.output import OutputPump
from harness.outcome import Kind
from harness.report.model import Report
from tests.harness_cli import harness, verdict_of

pytestmark = pytest.mark.timeout(120)
PROGRAMS = Path(__file__).resolve().parent / "programs"
FLOOD = PROGRAMS / "flood.py"
FINAL = "PufferLib 5.0  env=flood  steps=4242  SPS=99  epoch=7  to_go=0s"


def flood(
    tmp_path: Path, *args: str, parser: str = "lines"
) -> tuple[Report, dict[str, Any], bytes]:
    """Run flood.py unpaced under `harness watch`: the report, what it wrote, output.log."""
    stats = tmp_path / "stats.json"
    cmd = [sys.executable, str(FLOOD), "--rate", "0", "--stats", str(stats), *args]
    res = harness(
        "watch", "--parser", parser, "--timeout", "90", "--", *cmd, report_root=tmp_path / "r"
    )
    assert res.report_dir is not None, res.stderr
    return res.loaded, json.loads(stats.read_text()), (res.report_dir / "output.log").read_bytes()


def test_flood_is_logged_byte_for_byte(tmp_path: Path) -> None:
    report, written, log = flood(tmp_path, "--bytes", "20000000")
    assert verdict_of(report).kind is Kind.PASS, report.verdict
    assert report.exit is not None and report.exit.returncode == 0
    assert len(log) == written["bytes"] == 20_000_000
    assert hashlib.sha256(log).hexdigest() == written["sha256"]
    # what makes it hard: binary, invalid UTF-8, CR, lines over a megabyte, no final newline
    assert b"\x00" in log and b"\r" in log and not log.endswith(b"\n")
    with pytest.raises(UnicodeDecodeError):
        log.decode("utf-8")
    assert max(len(line) for line in log.split(b"\n")) > 1024 * 1024
    assert report.progress.output_lines == log.count(b"\n") + 1 == written["newlines"] + 1


def test_newest_frame_is_parsed_after_a_flood(tmp_path: Path) -> None:
    report, written, log = flood(
        tmp_path, "--bytes", "30000000", "--final", f"\\n{FINAL}\\n", parser="puffer5"
    )
    assert verdict_of(report).kind is Kind.PASS, report.verdict
    assert hashlib.sha256(log).hexdigest() == written["sha256"]
    assert log.endswith(f"\n{FINAL}\n".encode())
    last = report.progress.last_metrics
    assert (last["agent_steps"], last["SPS"], last["epoch"]) == (4242, 99, 7)
    assert report.progress.output_lines == written["newlines"]
    assert report.progress.output_tail[-1] == FINAL


# --- the pump in-process --------------------------------------------------------------------


class SlowParser:
    """Every line costs 1 ms; `value=N` lines are frames."""

    name = "slow"

    def __init__(self) -> None:
        self.count = 0

    def feed(self, line: str) -> list[dashboard.MetricsFrame]:
        time.sleep(0.001)
        if not line.startswith("value="):
            return []
        self.count += 1
        return [dashboard.MetricsFrame(self.count - 1, {"value": float(line[6:])}, {}, 0)]

    def finish(self) -> list[dashboard.MetricsFrame]:
        return []


def pump_bytes(
    tmp_path: Path, chunks: list[bytes], parser: dashboard.Parser, echo: TextIO | None = None
) -> OutputPump:
    """Run the pump over a pipe the chunks are written to (from a thread), to the end."""
    read_fd, write_fd = os.pipe()
    log = tmp_path / "output.log"
    log.write_bytes(b"")
    pump = OutputPump(read_fd, log, parser, echo)

    def write() -> None:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(write_fd, view) :]
        os.close(write_fd)

    writer = threading.Thread(target=write)
    pump.start()
    writer.start()
    writer.join(30)
    pump.join(30)
    os.close(read_fd)
    assert not pump.is_alive()
    assert log.read_bytes() == b"".join(chunks)
    return pump


def test_slow_parser_skips_to_the_newest_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "MAX_LAG_S", 0.5)
    lines = [f"value={i}\n".encode() for i in range(60_000)]  # a minute of parsing
    pump = pump_bytes(
        tmp_path, [b"".join(lines[i : i + 1000]) for i in range(0, 60_000, 1000)], SlowParser()
    )
    assert pump.lines == 60_000
    assert 0 < pump.unparsed_lines < 60_000
    assert pump.parsed_lines + pump.unparsed_lines == 60_000
    frames = pump.frames
    assert frames[-1].metrics == {"value": 59_999.0}
    assert frames[-1].line_no == 60_000  # the output's line number, whatever was skipped
    assert len(frames) == pump.frames_total == pump.parsed_lines


def test_frames_are_capped_first_and_most_recent_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "MAX_LAG_S", 600.0)  # parse every line, however loaded the host
    n = 30_000
    pump = pump_bytes(
        tmp_path, [b"".join(b"x%d\n" % i for i in range(n))], dashboard.get_parser("lines")
    )
    frames = pump.frames
    assert pump.frames_total == n and pump.unparsed_lines == 0
    assert len(frames) == output.FRAMES_CAP
    head, recent = frames[: output.FRAMES_HEAD], frames[output.FRAMES_HEAD :]
    assert [f.line_no for f in head] == list(range(1, output.FRAMES_HEAD + 1))
    assert [f.line_no for f in recent] == list(range(n - len(recent) + 1, n + 1))
    assert len(pump.take_progress()) == n


def test_tail_and_line_count_with_unterminated_last_line(tmp_path: Path) -> None:
    body = b"".join(b"line %d\r\n" % i for i in range(1000)) + b"\xff\x00 last"
    pump = pump_bytes(tmp_path, [body[:777], body[777:]], dashboard.get_parser("lines"))
    assert pump.lines == 1001
    tail = pump.tail
    assert len(tail) == output.TAIL_LINES
    assert tail[-2] == "line 999" and tail[-1] == "\ufffd\x00 last"
    assert pump.frames[-1].line_no == 1001


def test_long_line_reaches_the_parser_in_pieces(tmp_path: Path) -> None:
    long = b"y" * (3 * output.MAX_LINE + 5)
    pump = pump_bytes(tmp_path, [long, b"\nend\n"], dashboard.get_parser("lines"))
    assert pump.lines == 2 and pump.unparsed_lines == 0
    assert [f.line_no for f in pump.frames] == [1, 1, 1, 1, 2]  # three pieces and the rest


class StuckTerminal:
    """A terminal that stops reading until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.text: list[str] = []

    def write(self, s: str) -> int:
        self.release.wait()
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_a_stuck_terminal_never_blocks_the_pump(tmp_path: Path) -> None:
    term = StuckTerminal()
    chunks = [
        b"".join(b"%d %s\n" % (i, b"z" * 100) for i in range(j, j + 1000))
        for j in range(0, 80_000, 1000)
    ]
    t0 = time.monotonic()
    pump = pump_bytes(tmp_path, chunks, dashboard.get_parser("lines"), echo=cast(TextIO, term))
    assert time.monotonic() - t0 < output.ECHO_DRAIN_S + 10
    assert pump.lines == 80_000
    term.release.set()
    deadline = time.monotonic() + 10
    while "lines not shown" not in "".join(term.text) and time.monotonic() < deadline:
        time.sleep(0.05)
    shown = "".join(term.text)
    assert "lines not shown: the terminal is slower" in shown
    assert pump.echo_dropped_lines > 0


def test_echo_shows_every_byte_when_the_terminal_keeps_up(tmp_path: Path) -> None:
    term = io.StringIO()
    body = "épée ✓\r\n".encode() * 5000 + b"\xff\xfe cut \xe2\x9c"
    pump = pump_bytes(
        tmp_path,
        [body[i : i + 4097] for i in range(0, len(body), 4097)],
        dashboard.get_parser("lines"),
        echo=term,
    )
    assert pump.echo_dropped_lines == 0
    assert term.getvalue() == body.decode("utf-8", "replace") + "\n"  # the last line ended
