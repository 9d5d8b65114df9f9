"""Time the harness did not see does not count: a gap between the watchdog's looks far beyond
the cadence (the harness stopped, starved, its VM frozen, the machine suspended) is a pause.
The startup and stall windows leave it out, the quiescence evidence restarts after it, the
wall limit counts it, and the report notes it (docs/quiescence.md).

Unit tests drive the watchdog with a fake clock; the real ones SIGSTOP the harness process
itself (not the program it watches) for 8 s, as a CI runner, a laptop lid or a VM pause do."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.outcome import Kind
from harness.report.load import load_report
from harness.report.model import Report
from harness.vocab import Mechanism
from harness.watch.watchdog import (
    MAX_PAUSES,
    SETTLE_S,
    Limits,
    Pause,
    Trigger,
    Watchdog,
    pause_threshold,
)
from tests.harness_cli import ROOT, only_report_dir, verdict_of, wait_for_trainer, watch_opts

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

PROGRAMS = Path(__file__).resolve().parent / "programs"
PAUSE_S = 8.0
WINDOWS = watch_opts(startup=3, stall=2, timeout=40)  # `harness watch` under a pause


def ticking(dog: Watchdog, start: float, end: float, step: float = 0.1) -> Trigger | None:
    """Look and check every `step` from `start` to `end` (inclusive): the first trigger."""
    n = round((end - start) / step)
    for i in range(n + 1):
        now = start + i * step
        dog.look(now)
        if (fired := dog.check(now)) is not None:
            return fired
    return None


# ---------------------------------------------------------------- the watchdog, fake clock


def test_a_chatty_run_paused_8s_is_not_a_stall() -> None:
    dog = Watchdog(Limits(wall_s=60, startup_s=3, stall_s=2), started_at=0.0)
    for i in range(1, 31):  # a line every 0.1 s for 3 s
        dog.progress(i * 0.1)
        dog.look(i * 0.1)
        assert dog.check(i * 0.1) is None
    pause = dog.look(3.0 + PAUSE_S)  # stopped for 8 s: the next look comes late
    assert pause == Pause(at_s=3.0, gap_s=PAUSE_S)
    assert dog.check(11.0) is None  # before the fix: STALL (8 s without progress)
    # the lines written meanwhile are read after the pause, stamped late; on it goes
    for i in range(1, 21):
        dog.progress(11.0 + i * 0.1)
        dog.look(11.0 + i * 0.1)
        assert dog.check(11.0 + i * 0.1) is None
    assert dog.progressing(13.0)
    assert (dog.pauses, dog.pauses_total) == ([pause], 1)
    assert dog.paused_s == pytest.approx(PAUSE_S)
    (note,) = dog.pause_notes()
    assert "paused for 8.0s at 3.0s" in note and "quiescence evidence restarted" in note


def test_the_stall_window_counts_only_watched_silence() -> None:
    """A real stall through a pause is still called: after the window of silence the
    harness saw, before and after the pause."""
    dog = Watchdog(Limits(wall_s=60, startup_s=3, stall_s=5), started_at=0.0)
    dog.progress(2.0)  # then silence: a genuine hang
    assert ticking(dog, 0.1, 3.0) is None
    assert dog.look(11.0) is not None
    assert ticking(dog, 11.0, 14.9) is None  # 1 s before + 3.9 s after: 4.9 s watched
    assert ticking(dog, 15.0, 15.0) is Trigger.STALL  # 5 s of watched silence
    reason = dog.reason(Trigger.STALL, 15.0)
    assert "no new progress for 5.0s (stall window 5s, not counting 8.0s" in reason, reason
    assert dog.countdown(13.0) == pytest.approx(("stall", 2.0))
    assert not dog.progressing(15.0)


def test_the_startup_window_counts_only_watched_time() -> None:
    dog = Watchdog(Limits(wall_s=60, startup_s=3, stall_s=2), started_at=0.0)
    assert ticking(dog, 0.1, 1.0) is None
    assert dog.look(9.0) is not None
    assert dog.countdown(9.0) == pytest.approx(("startup", 2.0))
    assert ticking(dog, 9.0, 10.9) is None
    assert ticking(dog, 11.0, 11.0) is Trigger.STARTUP
    assert "not counting 8.0s the harness was paused" in dog.reason(Trigger.STARTUP, 11.0)


def test_no_window_fires_while_the_output_of_the_pause_is_read() -> None:
    """Right after a pause the trainer's output from meanwhile still waits in the pipe:
    for SETTLE_S no window fires, even one the silence before the pause nearly filled."""
    dog = Watchdog(Limits(wall_s=60, startup_s=3, stall_s=2), started_at=0.0)
    dog.progress(0.0)
    assert ticking(dog, 0.1, 1.9) is None
    dog.look(9.9)
    assert dog.watched(0.0, 10.5) == pytest.approx(2.5)  # over the window, but settling
    assert dog.check(9.9 + SETTLE_S - 0.01) is None
    assert dog.check(9.9 + SETTLE_S) is Trigger.STALL


def test_quiescence_evidence_restarts_after_a_pause() -> None:
    """Quiescence is read from consecutive looks: the quiet run before a pause proves
    nothing about the time no one looked."""
    dog = Watchdog(Limits(wall_s=60, startup_s=30, stall_s=30, quiescent_s=5), started_at=0.0)
    dog.quiet(1.0)
    assert ticking(dog, 0.1, 3.0) is None
    dog.look(11.0)
    assert ticking(dog, 11.1, 15.9) is None  # unpaused, it fires at 6.0
    assert ticking(dog, 16.0, 16.0) is Trigger.QUIESCENT
    assert "blocked on the tree for 5.0s" in dog.reason(Trigger.QUIESCENT, 16.0)


def test_the_wall_limit_counts_a_pause() -> None:
    """--timeout is the user's budget of running time (a sweep and CI rely on it)."""
    dog = Watchdog(Limits(wall_s=5, startup_s=30, stall_s=30), started_at=0.0)
    dog.progress(0.5)
    dog.look(1.0)
    dog.look(9.0)
    assert dog.check(9.0) is Trigger.WALL  # settling does not hold the wall
    assert "8.0s of it paused" in dog.reason(Trigger.WALL, 9.0)
    assert dog.progressing(9.0)  # progress 0.5 s of watched time ago: a timeout, not a hang


def test_a_suspend_of_the_machine_is_noted() -> None:
    """CLOCK_MONOTONIC stops while the machine sleeps, CLOCK_BOOTTIME does not: the
    monotonic gap is small, nothing to leave out, but the tree was not watched."""
    dog = Watchdog(Limits(wall_s=60, startup_s=30, stall_s=30, quiescent_s=5), started_at=0.0)
    dog.quiet(0.0)
    assert dog.look(1.0, boot=101.0) is None
    pause = dog.look(1.1, boot=3701.1)
    assert pause is not None and (pause.at_s, pause.suspended_s) == (1.0, 3600.0)
    assert pause.words().startswith("the machine was suspended for 3600.0s at 1.0s")
    assert dog.check(5.9) is None  # quiet since 1.1, not since 0.0
    assert dog.check(6.2) is Trigger.QUIESCENT


def test_what_is_not_a_pause() -> None:
    assert pause_threshold(0.25) == 2.0  # 8 cadences, at least 2 s
    assert pause_threshold(1.0) == 8.0
    dog = Watchdog(Limits(wall_s=60, startup_s=30, stall_s=30), started_at=0.0, pause_after_s=2)
    assert dog.look(1.9) is None  # a loaded machine's late look
    dog.resync(9.0)  # the harness was busy on purpose (a stack dump)
    assert dog.look(9.1) is None
    assert (dog.pauses, dog.paused_s, dog.pause_notes()) == ([], 0.0, [])


def test_progress_stamped_inside_the_gap_counts_from_the_pause() -> None:
    """Which side of the stop a stamp inside the gap came from cannot be told: it counts as
    made at the pause, never as older silence."""
    dog = Watchdog(Limits(wall_s=60, startup_s=3, stall_s=2), started_at=0.0)
    dog.look(1.0)
    dog.look(9.0)
    dog.progress(5.0)  # read during the gap: before or after the stop, no one knows
    assert dog.watched(5.0, 9.0) == 0.0
    assert dog.check(10.9) is None and dog.check(11.0) is Trigger.STALL


def test_pauses_listed_are_bounded() -> None:
    dog = Watchdog(Limits(wall_s=1e6, startup_s=1e6, stall_s=1e6), started_at=0.0)
    for i in range(MAX_PAUSES + 7):
        dog.look(10.0 * i + 0.1)
        assert dog.look(10.0 * (i + 1)) is not None
    assert len(dog.pauses) == MAX_PAUSES and dog.pauses_total == MAX_PAUSES + 7
    notes = dog.pause_notes()
    assert len(notes) == MAX_PAUSES + 1 and notes[-1] == "7 more pauses of the harness not listed"


# ---------------------------------------------------------------- the harness, SIGSTOPped


@dataclass
class Paused:
    code: int
    stderr: str
    folder: Path
    stopped_at: float  # seconds since the harness started
    elapsed: float

    @property
    def loaded(self) -> Report:
        """The report read back typed (harness.report.load)."""
        return load_report(self.folder)

    def pause_gaps(self) -> list[float]:
        notes = self.loaded.notes
        return [float(m[1]) for n in notes if (m := re.search(r"paused for ([\d.]+)s", n))]


def watch_paused(
    tmp_path: Path, cmd: list[str], opts: Sequence[str], ready: Callable[[Path], bool]
) -> Paused:
    """`harness watch OPTS -- CMD`, paused as `harness_paused` says."""
    return harness_paused(tmp_path, ["watch", *opts, "--", *cmd], ready)


def harness_paused(
    tmp_path: Path,
    args: list[str],
    ready: Callable[[Path], bool],
    env: dict[str, str] | None = None,
) -> Paused:
    """`harness ARGS`; once its run started and `ready(report folder)` holds, the harness
    process alone is stopped for PAUSE_S and continued."""
    root = tmp_path / "reports"
    argv = [sys.executable, "-m", "harness", args[0], "--report-dir", str(root), *args[1:]]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_for_trainer(proc, root, 30)
        folder = only_report_dir(root)
        assert folder is not None
        deadline = time.monotonic() + 10
        while not ready(folder):
            assert time.monotonic() < deadline and proc.poll() is None, "never ready"
            time.sleep(0.05)
        stopped_at = time.monotonic() - start
        os.kill(proc.pid, signal.SIGSTOP)  # the harness, not its process group
        time.sleep(PAUSE_S)
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return Paused(
        proc.returncode, err.decode(errors="replace"), folder, stopped_at, time.monotonic() - start
    )


def output_has(text: str, count: int = 1, then_s: float = 0.0) -> Callable[[Path], bool]:
    """Ready once output.log has `text` `count` times, and `then_s` more seconds passed."""
    seen: list[float] = []

    def ready(folder: Path) -> bool:
        if not seen:
            with contextlib.suppress(OSError):
                if (folder / "output.log").read_text().count(text) >= count:
                    seen.append(time.monotonic())
        return bool(seen) and time.monotonic() >= seen[0] + then_s

    return ready


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_healthy_chatty_program_survives_a_paused_harness(tmp_path: Path) -> None:
    """Before the fix: "hang (deadlock)", trigger stall, every time (the 8 s of the pause
    counted as 8 s without output against a 2 s stall window)."""
    res = watch_paused(
        tmp_path,
        # it outlives the pause by a few seconds: the harness must judge it after the pause
        [sys.executable, str(PROGRAMS / "slow_printer.py"), "12"],
        WINDOWS,
        output_has("step 3"),
    )
    report = res.loaded
    v = verdict_of(report)
    assert (res.code, v.kind, report.trigger) == (0, Kind.PASS, Trigger.EXIT), (v, report.exit)
    assert "done" in (res.folder / "output.log").read_text()  # it ran to its end
    gaps = res.pause_gaps()
    assert gaps and PAUSE_S - 0.5 <= max(gaps) <= PAUSE_S + 5, report.notes
    assert res.elapsed >= res.stopped_at + PAUSE_S


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_genuine_deadlock_is_still_called_after_a_pause(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """Paused once the threads have said they hold their first lock: the silence the
    harness saw before the pause still counts, the pause does not, and the verdict comes."""
    res = watch_paused(
        tmp_path,
        [str(c_program("mutex_deadlock"))],
        WINDOWS,
        output_has(" holds ", 2, then_s=0.5),  # in the log, then parsed: silence starts
    )
    report = res.loaded
    v = verdict_of(report)
    assert (res.code, v.kind, v.mechanism) == (2, Kind.HANG, Mechanism.DEADLOCK), v
    assert v.location in ("transfer_a_to_b", "transfer_b_to_a")
    not_the_wall = (Trigger.STALL, Trigger.QUIESCENT, Trigger.CLOSED)
    assert report.trigger in not_the_wall, report.exit
    gaps = res.pause_gaps()
    assert gaps and max(gaps) >= PAUSE_S - 0.5, report.notes
    assert res.elapsed >= res.stopped_at + PAUSE_S


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.needs_tool("gcc", why="builds the fixed replica")
def test_the_fixed_replica_survives_a_paused_harness(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    """The issue's second finding: the fixed replica, a 4 s stall window, the harness
    stopped for 8 s mid-run. Before the fix: "hang (spin) in vec_thread_main" in 1 of 2
    runs by hand, 2 of 2 in the issue (its workers spin by design, and the 8 s the harness
    did not see counted as 8 s without a frame)."""
    built = subprocess.run(
        [sys.executable, "-m", "harness", "build", "breakout", "--variant", "fixed"],
        cwd=ROOT,
        env={**os.environ, **cache_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr  # the run below is a cache hit
    args = ["run", "breakout", "--variant", "fixed", "--stall", "4", "--timeout", "90"]
    # a run that outlives the pause: the harness judges it after the pause
    res = harness_paused(tmp_path, [*args, "--steps", "8388608"], output_has("Steps", 2), cache_env)
    report = res.loaded
    assert (res.code, verdict_of(report).kind) == (0, Kind.PASS), (report.verdict, res.stderr)
    gaps = res.pause_gaps()
    assert gaps and max(gaps) >= PAUSE_S - 0.5, report.notes
