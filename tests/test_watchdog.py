from harness.watch.watchdog import Limits, Trigger, Watchdog

LIMITS = Limits(wall_s=60, startup_s=10, stall_s=5)


def test_startup_window_fires_without_progress() -> None:
    dog = Watchdog(LIMITS, started_at=100.0)
    assert dog.check(109.9) is None
    assert dog.check(110.0) is Trigger.STARTUP
    assert "startup window (10s)" in dog.reason(Trigger.STARTUP, 110.0)


def test_progress_moves_from_startup_to_stall() -> None:
    dog = Watchdog(LIMITS, started_at=0.0)
    dog.progress(8.0)
    assert dog.check(12.9) is None  # startup no longer applies once progress was seen
    assert dog.check(13.0) is Trigger.STALL
    assert dog.first_progress_at == 8.0


def test_steady_progress_never_stalls_until_wall() -> None:
    dog = Watchdog(LIMITS, started_at=0.0)
    for t in range(1, 60):
        dog.progress(float(t))
        assert dog.check(t + 0.5) is None
    assert dog.check(60.0) is Trigger.WALL
    assert dog.progressing(60.0)


def test_wall_wins_and_progressing_reflects_recent_progress() -> None:
    dog = Watchdog(Limits(wall_s=5, startup_s=10, stall_s=10), started_at=0.0)
    assert dog.check(5.0) is Trigger.WALL
    assert not dog.progressing(5.0)
    dog.progress(4.0)
    assert dog.progressing(5.0)
