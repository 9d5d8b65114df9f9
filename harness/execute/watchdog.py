"""Startup / stall / wall timers that decide when a run is suspected to hang.

The watchdog is pure logic over a monotonic clock so that it can be tested without
processes: the runner tells it when progress happened and asks it, on each poll, whether
a limit has been crossed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Trigger(StrEnum):
    STARTUP = "startup"  # no first progress within the startup window
    STALL = "stall"  # progress stopped for longer than the stall window
    WALL = "wall"  # total wall-clock limit reached
    EXIT = "exit"  # the process exited on its own
    INTERRUPT = "interrupt"  # the harness itself was interrupted


@dataclass(frozen=True)
class Limits:
    wall_s: float
    startup_s: float
    stall_s: float

    def describe(self) -> str:
        return f"startup {self.startup_s:g}s, stall {self.stall_s:g}s, wall {self.wall_s:g}s"


@dataclass
class Watchdog:
    limits: Limits
    started_at: float
    first_progress_at: float | None = None
    last_progress_at: float | None = None
    progress_events: int = 0

    def progress(self, now: float) -> None:
        if self.first_progress_at is None:
            self.first_progress_at = now
        self.last_progress_at = now
        self.progress_events += 1

    def check(self, now: float) -> Trigger | None:
        """The limit crossed at `now`, if any. Wall wins over the others when both fire."""
        elapsed = now - self.started_at
        if elapsed >= self.limits.wall_s:
            return Trigger.WALL
        if self.last_progress_at is None:
            return Trigger.STARTUP if elapsed >= self.limits.startup_s else None
        if now - self.last_progress_at >= self.limits.stall_s:
            return Trigger.STALL
        return None

    def progressing(self, now: float) -> bool:
        """True while the last progress is recent enough that the run is not stalled."""
        if self.last_progress_at is None:
            return False
        return now - self.last_progress_at < self.limits.stall_s

    def reason(self, trigger: Trigger, now: float) -> str:
        elapsed = now - self.started_at
        if trigger is Trigger.STARTUP:
            return f"no progress within the startup window ({self.limits.startup_s:g}s)"
        if trigger is Trigger.STALL:
            assert self.last_progress_at is not None
            quiet = now - self.last_progress_at
            return (
                f"no new progress for {quiet:.1f}s (stall window {self.limits.stall_s:g}s) "
                f"after {self.progress_events} progress events"
            )
        if trigger is Trigger.WALL:
            return f"wall-clock limit reached ({elapsed:.1f}s of {self.limits.wall_s:g}s)"
        return trigger.value
