"""Startup / stall / wall timers that decide when a run is suspected to hang.

The watchdog is pure logic over a monotonic clock so that it can be tested without
processes: the runner tells it when progress happened and since when the tree has been
quiescent (the watch loop's judgement, docs/quiescence.md), and asks it, on each poll,
whether a limit has been crossed.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.vocab import Trigger

__all__ = ["DEFAULT_QUIESCENT_S", "Limits", "Trigger", "Watchdog"]

# Long enough that a healthy tree is never caught between two wake-ups (the rule already
# excludes every timed or outside wait), short enough to beat any startup window.
DEFAULT_QUIESCENT_S = 5.0


@dataclass(frozen=True)
class Limits:
    wall_s: float
    startup_s: float
    stall_s: float
    quiescent_s: float = DEFAULT_QUIESCENT_S  # 0: no early deadlock verdict

    def describe(self) -> str:
        quiet = f"quiescent {self.quiescent_s:g}s" if self.quiescent_s > 0 else "quiescence off"
        return (
            f"startup {self.startup_s:g}s, stall {self.stall_s:g}s, wall {self.wall_s:g}s, " + quiet
        )


@dataclass
class Watchdog:
    limits: Limits
    started_at: float
    first_progress_at: float | None = None
    last_progress_at: float | None = None
    progress_events: int = 0
    quiet_since: float | None = None

    def quiet(self, since: float | None) -> None:
        """The tree has been quiescent since `since` (None: it is not)."""
        self.quiet_since = since

    def progress(self, now: float) -> None:
        if self.first_progress_at is None:
            self.first_progress_at = now
        self.last_progress_at = now
        self.progress_events += 1

    def check(self, now: float) -> Trigger | None:
        """The limit crossed at `now`, if any. Wall wins over the others when both fire,
        then quiescence (it says more than a window does)."""
        elapsed = now - self.started_at
        if elapsed >= self.limits.wall_s:
            return Trigger.WALL
        if self._quiet_for(now) >= self.limits.quiescent_s > 0:
            return Trigger.QUIESCENT
        if self.last_progress_at is None:
            return Trigger.STARTUP if elapsed >= self.limits.startup_s else None
        if now - self.last_progress_at >= self.limits.stall_s:
            return Trigger.STALL
        return None

    def _quiet_for(self, now: float) -> float:
        return -1.0 if self.quiet_since is None else now - self.quiet_since

    def progressing(self, now: float) -> bool:
        """True while the last progress is recent enough that the run is not stalled."""
        if self.last_progress_at is None:
            return False
        return now - self.last_progress_at < self.limits.stall_s

    def countdown(self, now: float) -> tuple[str, float]:
        """The window counting now and the seconds left in it (for live progress): the
        startup window until the first progress, then the stall window."""
        if self.last_progress_at is None:
            return "startup", self.limits.startup_s - (now - self.started_at)
        return "stall", self.limits.stall_s - (now - self.last_progress_at)

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
        if trigger is Trigger.QUIESCENT:
            return (
                f"every thread blocked on the tree for {self._quiet_for(now):.1f}s "
                f"(no CPU, no output; quiescence window {self.limits.quiescent_s:g}s)"
            )
        if trigger is Trigger.WALL:
            return f"wall-clock limit reached ({elapsed:.1f}s of {self.limits.wall_s:g}s)"
        return trigger.value
