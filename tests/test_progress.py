"""Live progress: plain lines in CI (no terminal), one line redrawn in place on a terminal,
nothing with --quiet, and stdout kept clean for --json."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.pipeline.repeat import Target, progress_done
from harness.report.live import LiveProgress, Status, render
from harness.report.runs import RunRow
from harness.vocab import Phase, Trigger
from tests.harness_cli import ROOT, harness

TICKER = "import time\nfor i in range({n}):\n    print('step', i, flush=True)\n    time.sleep(1)\n"


def test_render_names_the_window_and_the_progress() -> None:
    s = Status(Phase.RUN, 12.4, Trigger.STARTUP, 2.6, {"epoch": 3, "agent_steps": 786432}, 104.0)
    line = render("harness run breakout", s)
    assert line == (
        "harness run breakout: run | 12s | startup window: 3s left | epoch 3, "
        "agent_steps 786.4K | tree CPU 104%"
    )


def test_plain_lines_are_rate_limited_but_phases_always_print(tmp_path: Path) -> None:
    out = tmp_path / "progress.txt"
    with out.open("w") as stream:
        p = LiveProgress("harness run x", stream=stream, every_s=3600, terminal=False)
        p.phase(Phase.BUILD)  # a setup phase prints only once it lasts (a failed setup: silent)
        for i in range(50):
            p.update(i, Trigger.STARTUP, 10 - i, {}, None)
        p.phase(Phase.CHECKS)
        p.close()
    lines = out.read_text().splitlines()
    assert [ln.split(": ", 1)[1].split(" |")[0] for ln in lines] == ["run", "checks"]


def test_a_long_setup_phase_still_prints(tmp_path: Path) -> None:
    out = tmp_path / "progress.txt"
    with out.open("w") as stream:
        p = LiveProgress("harness run x", stream=stream, every_s=0.5, terminal=False)
        p.phase(Phase.BUILD)
        time.sleep(1.8)
        p.close()
    lines = out.read_text().splitlines()
    assert len(lines) >= 2 and all(": build" in ln for ln in lines), lines


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_run_without_a_terminal_prints_progress_lines(tmp_path: Path) -> None:
    res = harness(
        "watch",
        "--progress-every",
        "2",
        "--json",
        "--",
        sys.executable,
        "-c",
        TICKER.format(n=10),
        report_root=tmp_path,
    )
    assert res.code == 0, res.stderr
    json.loads(res.stdout)  # --json: stdout is the report alone
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("harness watch")]
    runs = [ln for ln in lines if ": run |" in ln]
    assert len(runs) >= 4, res.stderr  # ~10 s at one line per 2 s, and the phase line
    assert any("stall window" in ln for ln in runs), runs
    summary_at = res.stderr.index("verdict")
    assert res.stderr.index(runs[-1]) < summary_at, "progress comes before the summary"


@pytest.mark.timeout(60)
def test_quiet_prints_no_progress(tmp_path: Path) -> None:
    res = harness(
        "watch", "--quiet", "--", sys.executable, "-c", TICKER.format(n=3), report_root=tmp_path
    )
    assert res.code == 0
    assert not [ln for ln in (res.stdout + res.stderr).splitlines() if ": run |" in ln]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_terminal_shows_the_live_line(tmp_path: Path) -> None:
    """Under a pseudo-terminal the line is redrawn in place (cursor control, no new line per
    update), then replaced by the summary."""
    leader, follower = pty.openpty()
    argv = [sys.executable, "-m", "harness", "watch", "--report-dir", str(tmp_path), "--"]
    argv += [sys.executable, "-c", TICKER.format(n=4)]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
        start_new_session=True,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 50
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the other side closed
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(leader)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "harness watch" in text and ": run |" in text
    assert re.search(r"\x1b\[(\d+)?[AK]|\r", text), "the line is redrawn in place"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert plain.count(": run |") >= 2  # several redraws of the one line
    assert "verdict" in plain


def test_without_a_terminal_each_line_is_printed_once(tmp_path: Path) -> None:
    """`harness triage` in CI printed `runs | 1/8 (…) → hang in env_start` twice in a row:
    while the next run took longer than `every_s`, the heartbeat printed the last finished
    run's line again, read as a second run. Each line once; a heartbeat says it still works."""
    out = tmp_path / "progress.txt"
    target = Target(tmp_path, lambda folder: [], {"OMP_WAIT_POLICY": "active"})
    first = (
        "harness triage breakout: runs | 1/8 (OMP_WAIT_POLICY=active, run=1) → hang in env_start"
    )

    def row(n: int) -> RunRow:
        values = {"OMP_WAIT_POLICY": "active", "run": str(n)}
        return RunRow(values=values, kind=Kind.HANG, location="env_start")

    with out.open("w") as stream:
        p = LiveProgress("harness triage breakout", stream=stream, every_s=1.0, terminal=False)
        done = progress_done(p, 8)
        done(target, row(1))
        deadline = time.monotonic() + 30  # two heartbeats: 2 s idle, more on a loaded host
        while len(out.read_text().splitlines()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        done(target, row(2))
        p.close()
    lines = out.read_text().splitlines()
    assert lines[0] == first, lines
    assert len(lines) >= 4 and len(set(lines)) == len(lines), lines
    assert all(ln.startswith(f"{first} | still working, ") for ln in lines[1:-1]), lines
    assert lines[-1] == first.replace("1/8", "2/8").replace("run=1", "run=2"), lines
