"""Startup / stall / wall timers that decide when a run is suspected to hang.

The watchdog is pure logic over a monotonic clock so that it can be tested without
processes: the runner tells it when progress happened and since when the tree has been
quiescent (the watch loop's judgement, docs/quiescence.md), and asks it, on each poll,
whether a limit has been crossed.

Time the harness did not see does not count (docs/quiescence.md, "When the harness is
paused"): the runner shows the watchdog every look (`look`); a gap between two looks far
beyond the cadence is a pause (the harness was stopped, starved of CPU, its VM frozen, the
machine suspended). The startup and stall windows do not count a pause as silence (they
measure watched time), the quiescence evidence restarts after it, and the wall limit, the
user's budget of running time, counts it.

The clock is CLOCK_MONOTONIC (time.monotonic), the clock of every other stamp of a run
(output, snapshots, samples). It advances while the harness alone is stopped (SIGSTOP, a
starved process, and in most hypervisors a frozen VM) and stops while the machine is
suspended, so a suspend never counts toward any limit, the wall included. CLOCK_BOOTTIME,
which also counts a suspend, is read beside it only to notice and note one (`look`'s
`boot`): a suspend leaves the timers nothing to exclude, but the tree was not watched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.vocab import Trigger

__all__ = ["DEFAULT_QUIESCENT_S", "Limits", "Pause", "Trigger", "Watchdog", "pause_threshold"]

# Long enough that a healthy tree is never caught between two wake-ups (the rule already
# excludes every timed or outside wait), short enough to beat any startup window.
DEFAULT_QUIESCENT_S = 5.0
# a closed set of the wake graph (closedwatch.py) must hold this long (and over its looks)
CLOSED_CONFIRM_S = 1.0

# A gap between looks of PAUSE_CADENCES cadences, and never less than PAUSE_FLOOR_S, is a
# pause: a loaded machine delays a 0.1 s poll by a fraction of a second, never by seconds.
PAUSE_CADENCES = 8
PAUSE_FLOOR_S = 2.0
# After a pause no window fires for this long: the output the trainer wrote while the
# harness was stopped waits in the pipe, and is read and parsed first (the parser's own lag
# is at most a second: output.MAX_LAG_S).
SETTLE_S = 1.0
MAX_PAUSES = 50  # pauses listed in the report; more are counted
# At the wall limit a run is still progressing (timeout-progressing) only when its last
# progress is recent: within the stall window, and within the larger of a quarter of the
# wall and twice the longest silence between two of its own progress events (its own
# pace). So a run that printed once and then fell silent is a hang at the wall even under
# a stall or startup window longer than --timeout (watch's 60 s defaults with --timeout 5),
# and one that prints every 0.5 s is still progressing (docs/quiescence.md).
WALL_SHARE = 0.25
PACE_FACTOR = 2.0


def pause_threshold(cadence_s: float) -> float:
    """The gap between two looks, at this cadence, from which the harness was paused."""
    return max(PAUSE_CADENCES * cadence_s, PAUSE_FLOOR_S)


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


@dataclass(frozen=True)
class Pause:
    """Time the harness did not see: `gap_s` (CLOCK_MONOTONIC) after its look at `at_s`
    seconds since the start, and `suspended_s` more while the machine was suspended."""

    at_s: float
    gap_s: float
    suspended_s: float = 0.0

    def words(self) -> str:
        if self.suspended_s > self.gap_s:
            return (
                f"the machine was suspended for {self.suspended_s:.1f}s at {self.at_s:.1f}s: "
                "not counted toward any limit; the quiescence evidence restarted"
            )
        return (
            f"the harness was paused for {self.gap_s:.1f}s at {self.at_s:.1f}s (stopped, "
            "starved of CPU, or its VM frozen): not counted as silence by the startup and "
            "stall windows (the wall limit counts it); the quiescence evidence restarted"
        )


@dataclass
class Watchdog:
    limits: Limits
    started_at: float
    first_progress_at: float | None = None
    last_progress_at: float | None = None
    progress_events: int = 0
    quiet_since: float | None = None
    # since when a closed set of the wake graph has held, and the set in words
    closed_since: float | None = None
    closed_words: str = ""
    pause_after_s: float = PAUSE_FLOOR_S  # a longer gap between looks is a pause
    pauses: list[Pause] = field(default_factory=list)  # the first MAX_PAUSES
    pauses_total: int = 0
    paused_s: float = 0.0  # every pause's gap, summed
    longest_gap_s: float = 0.0  # the longest watched silence between two progress events
    resumed_at: float | None = None  # the look that ended the last pause
    # (start, end) of the pauses the stall window may still need: those after the last
    # progress (older ones are dropped as progress comes)
    _unseen: list[tuple[float, float]] = field(default_factory=list, init=False, repr=False)
    _look: tuple[float, float | None] | None = field(default=None, init=False, repr=False)

    def look(self, now: float, boot: float | None = None) -> Pause | None:
        """The runner looks at `now` (and `boot`, CLOCK_BOOTTIME, where there is one): the
        pause since its last look, if the gap between them says there was one."""
        last, self._look = self._look, (now, boot)
        prev, prev_boot = last if last is not None else (self.started_at, None)
        gap = max(0.0, now - prev)
        suspended = 0.0
        if boot is not None and prev_boot is not None:
            suspended = max(0.0, (boot - prev_boot) - gap)
        if gap < self.pause_after_s and suspended < self.pause_after_s:
            return None
        pause = Pause(round(prev - self.started_at, 3), round(gap, 3), round(suspended, 3))
        self._unseen.append((prev, now))
        self.paused_s += gap
        self.pauses_total += 1
        if len(self.pauses) < MAX_PAUSES:
            self.pauses.append(pause)
        self.resumed_at = now
        return pause

    def resync(self, now: float, boot: float | None = None) -> None:
        """The harness was busy on purpose since its last look (sampling): not a pause."""
        self._look = (now, boot)

    def pause_notes(self) -> list[str]:
        """One line per pause for the report, at most MAX_PAUSES and a count of the rest."""
        notes = [p.words() for p in self.pauses]
        rest = self.pauses_total - len(self.pauses)
        if rest > 0:
            notes.append(f"{rest} more pauses of the harness not listed")
        return notes

    def watched(self, since: float, now: float) -> float:
        """Seconds from `since` to `now` that the harness saw: pauses left out."""
        unseen = sum(max(0.0, end - max(start, since)) for start, end in self._unseen)
        return max(0.0, now - since - unseen)

    def quiet(self, since: float | None) -> None:
        """The tree has been quiescent since `since` (None: it is not)."""
        self.quiet_since = since

    def closed(self, since: float | None, words: str = "") -> None:
        """A closed set of the wake graph has held since `since` (None: there is none)."""
        self.closed_since, self.closed_words = since, words

    def progress(self, now: float) -> None:
        if self.first_progress_at is None:
            self.first_progress_at = now
        if self.last_progress_at is not None:
            gap = self.watched(self.last_progress_at, now)
            self.longest_gap_s = max(self.longest_gap_s, gap)
        self.last_progress_at = now
        self.progress_events += 1
        if self._unseen and self._unseen[0][1] <= now:
            self._unseen = [(a, b) for a, b in self._unseen if b > now]

    def check(self, now: float) -> Trigger | None:
        """The limit crossed at `now`, if any. Wall wins over the others when both fire,
        then quiescence (it says more than a window does)."""
        if now - self.started_at >= self.limits.wall_s:  # the user's budget: pauses count
            return Trigger.WALL
        if self.resumed_at is not None and now < self.resumed_at + SETTLE_S:
            return None
        if self._held_for(self.quiet_since, now) >= self.limits.quiescent_s > 0:
            return Trigger.QUIESCENT
        if (
            self.limits.quiescent_s > 0
            and self._held_for(self.closed_since, now) >= CLOSED_CONFIRM_S
        ):
            return Trigger.CLOSED
        if self.last_progress_at is None:
            started = self.watched(self.started_at, now)
            return Trigger.STARTUP if started >= self.limits.startup_s else None
        if self.watched(self.last_progress_at, now) >= self.limits.stall_s:
            return Trigger.STALL
        return None

    def _held_for(self, since: float | None, now: float) -> float:
        """How long evidence from consecutive looks (quiescence, a closed set) has held at
        `now`, -1 when it does not: none of it spans a pause."""
        if since is None:
            return -1.0
        if self.resumed_at is not None:
            since = max(since, self.resumed_at)
        return now - since

    def progress_window(self) -> float:
        """How recent the last progress must be for the run to count as still progressing
        at the wall limit (WALL_SHARE, PACE_FACTOR)."""
        pace = max(self.limits.wall_s * WALL_SHARE, PACE_FACTOR * self.longest_gap_s)
        return min(self.limits.stall_s, pace)

    def progressing(self, now: float) -> bool:
        """The last progress is recent enough (progress_window) that the run was still
        making progress at `now`: at the wall, timeout-progressing rather than a hang."""
        if self.last_progress_at is None:
            return False
        return self.watched(self.last_progress_at, now) < self.progress_window()

    def silence_words(self, now: float) -> str:
        """Why a run at the wall limit is or is not still progressing, in words."""
        window = f"progress window {self.progress_window():.1f}s"
        if self.last_progress_at is None:
            return f"no progress at all ({window})"
        quiet = self.watched(self.last_progress_at, now)
        return (
            f"last progress {quiet:.1f}s before ({self.progress_events} progress events; "
            f"{window}: the stall window, capped by a quarter of the wall or twice the "
            "longest gap between progress events, whichever is larger)"
        )

    def countdown(self, now: float) -> tuple[Trigger, float]:
        """The window counting now and the seconds left in it (for live progress): the
        startup window until the first progress, then the stall window."""
        if self.last_progress_at is None:
            return Trigger.STARTUP, self.limits.startup_s - self.watched(self.started_at, now)
        return Trigger.STALL, self.limits.stall_s - self.watched(self.last_progress_at, now)

    def _unseen_words(self, since: float, now: float) -> str:
        unseen = (now - since) - self.watched(since, now)
        return f", not counting {unseen:.1f}s the harness was paused" if unseen >= 0.05 else ""

    def reason(self, trigger: Trigger, now: float) -> str:
        elapsed = now - self.started_at
        if trigger is Trigger.STARTUP:
            return (
                f"no progress within the startup window ({self.limits.startup_s:g}s"
                f"{self._unseen_words(self.started_at, now)})"
            )
        if trigger is Trigger.STALL:
            assert self.last_progress_at is not None
            quiet = self.watched(self.last_progress_at, now)
            return (
                f"no new progress for {quiet:.1f}s (stall window {self.limits.stall_s:g}s"
                f"{self._unseen_words(self.last_progress_at, now)}) "
                f"after {self.progress_events} progress events"
            )
        if trigger is Trigger.QUIESCENT:
            held = self._held_for(self.quiet_since, now)
            return (
                f"every thread blocked on the tree for {held:.1f}s "
                f"(no CPU, no output; quiescence window {self.limits.quiescent_s:g}s)"
            )
        if trigger is Trigger.CLOSED:
            held = self._held_for(self.closed_since, now)
            return (
                f"{self.closed_words or 'a set of threads'}: "
                "nothing outside the set could wake it, "
                f"unchanged for {held:.1f}s (a closed set of the wake graph; "
                f"confirmation {CLOSED_CONFIRM_S:g}s)"
            )
        if trigger is Trigger.WALL:
            paused = f", {self.paused_s:.1f}s of it paused" if self.pauses_total else ""
            return (
                f"wall-clock limit reached ({elapsed:.1f}s of {self.limits.wall_s:g}s{paused}); "
                + self.silence_words(now)
            )
        return trigger.value
