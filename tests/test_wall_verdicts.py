"""Verdicts at the wall limit (issue 18, item 6): "still making progress" means progress
within the progress window (the stall window, capped by the larger of a quarter of the wall
and twice the run's own longest gap between progress events), otherwise the run is a hang
with its mechanism; threads that only sleep on timers are `idle`, not a deadlock."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import outcome
from harness.outcome import Kind
from harness.vocab import Mechanism, WakeEnd
from harness.watch.watchdog import Limits, Trigger, Watchdog
from tests.harness_cli import samples_of, verdict_of, watch_cmd, watch_opts

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

PROGRAMS = Path(__file__).resolve().parent / "programs"


# ---------------------------------------------------------------- the rule, fake clock


def test_one_line_then_silence_is_not_progress_at_the_wall() -> None:
    """A stall window longer than --timeout (watch's 60 s default with --timeout 5) used
    to make any line, however old, count as progress at the wall."""
    dog = Watchdog(Limits(wall_s=5, startup_s=60, stall_s=60), started_at=0.0)
    dog.progress(0.2)
    assert dog.check(5.0) is Trigger.WALL
    assert dog.progress_window() == pytest.approx(1.25)  # a quarter of the wall
    assert not dog.progressing(5.0)
    assert "last progress 4.8s before" in dog.reason(Trigger.WALL, 5.0)


def test_steady_output_is_progress_at_the_wall() -> None:
    dog = Watchdog(Limits(wall_s=5, startup_s=60, stall_s=60), started_at=0.0)
    for i in range(10):
        dog.progress(0.5 * i)
    assert dog.progressing(5.0)


def test_the_runs_own_pace_widens_the_window() -> None:
    """A trainer that logs every 10 s under --timeout 30: 9 s of silence is its pace."""
    dog = Watchdog(Limits(wall_s=30, startup_s=60, stall_s=60), started_at=0.0)
    for t in (1.0, 11.0, 21.0):
        dog.progress(t)
    assert dog.progress_window() == pytest.approx(20.0)
    assert dog.progressing(30.0)
    assert not dog.progressing(41.5)  # past twice its pace (were the wall later)


def test_the_stall_window_still_caps_the_window() -> None:
    dog = Watchdog(Limits(wall_s=3600, startup_s=60, stall_s=30), started_at=0.0)
    dog.progress(1.0)
    dog.progress(100.0)  # one long gap does not stretch it past the stall window
    assert dog.progress_window() == 30.0
    assert not dog.progressing(131.0)


# ---------------------------------------------------------------- real programs


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_print_once_then_nanosleep_is_an_idle_hang_at_the_wall(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    opts = watch_opts(timeout=5, stall=60)
    res = watch_cmd(tmp_path / "reports", str(c_program("wall_print_sleep")), opts=opts)
    report = res.loaded
    v = verdict_of(report)
    assert report.trigger is Trigger.WALL
    assert (v.kind, v.mechanism) == (Kind.HANG, Mechanism.IDLE), v.summary
    assert res.code == outcome.exit_code(Kind.HANG)
    assert v.location == "wait_for_nothing"
    assert "sleep" in v.runtime
    assert "last progress" in v.evidence[0]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_printing_every_half_second_is_still_progressing(tmp_path: Path) -> None:
    opts = watch_opts(timeout=5, stall=60)
    cmd = (sys.executable, str(PROGRAMS / "wall_printer.py"))
    res = watch_cmd(tmp_path / "reports", *cmd, opts=opts)
    assert verdict_of(res.loaded).kind is Kind.TIMEOUT_PROGRESSING
    assert res.code == outcome.exit_code(Kind.TIMEOUT_PROGRESSING)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_timed_wait_loop_is_idle_not_a_deadlock(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """Two threads in a pthread_cond_timedwait loop, main in pthread_join (it waits for
    them, and they only for a timer): idle, located in the loop."""
    opts = watch_opts(startup=3, stall=3, timeout=40)
    res = watch_cmd(tmp_path / "reports", str(c_program("wall_cond_timedwait")), opts=opts)
    report = res.loaded
    v = verdict_of(report)
    assert report.trigger is Trigger.STALL
    assert (v.kind, v.mechanism, v.location) == (Kind.HANG, Mechanism.IDLE, "poll_for_work")
    assert "condition variable" in v.runtime


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_python_program_asleep_is_idle_at_its_sleep_site(tmp_path: Path) -> None:
    """Its one line, then two threads asleep on timers: idle, in idle_loop. Both timers (an
    hour) end after the run's limit (10 s): the sleeps count as blocked and the verdict
    comes early (a closed set, docs/quiescence.md "Deadlines"), idle, not a deadlock: the
    chain from the main thread ends at its own sleep (`late`)."""
    opts = watch_opts(timeout=10, stall=60)
    cmd = (sys.executable, str(PROGRAMS / "wall_py_sleep.py"))
    report = watch_cmd(tmp_path / "reports", *cmd, opts=opts).loaded
    v = verdict_of(report)
    assert report.trigger is Trigger.CLOSED, v.summary
    wake = samples_of(report).wake
    assert wake is not None and wake.end is WakeEnd.LATE, wake
    assert report.progress.progress_events == 1, report.progress
    # the premise, as the watch loop saw it: both threads asleep at every snapshot
    seen = {a.tid: a.states for a in samples_of(report).activity}
    assert len(seen) == 2 and all(set(s) == {"S"} for s in seen.values()), seen
    assert (v.kind, v.mechanism, v.location) == (Kind.HANG, Mechanism.IDLE, "idle_loop"), v
