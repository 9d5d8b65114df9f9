"""Live progress while a command works, so that a hang is never a silent terminal (the very
symptom being diagnosed) and a CI log is never quiet long enough for CI's own no-output
timeout to fire first.

On a terminal: one line, redrawn in place (rich), then cleared for the final summary. Not a
terminal (CI, a pipe): a plain line every `every_s` seconds and at every phase change, each
line once (a heartbeat that finds nothing new since the last line says "still working", so
a finished run's line is not read as a second run). Both go to stderr, so `--json` keeps
stdout clean; `--quiet` turns them off.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from harness.text import terminal_safe
from harness.vocab import Phase, TriageStep, Trigger

# without a terminal these print only once they last (the heartbeat): a command that fails
# its setup ends with its one-line error alone, and a long build still shows it is alive
SETUP_PHASES = (Phase.START, Phase.VERIFY, Phase.PREPARE, Phase.BUILD)
PROGRESS_KEYS = ("epoch", "agent_steps", "SPS")


@dataclass
class Status:
    """What the line shows; the runner's Tick fills the run part."""

    phase: Phase | TriageStep = Phase.START
    elapsed_s: float = 0.0
    window: Trigger | None = None
    remaining_s: float | None = None
    metrics: dict[str, float] | None = None
    cpu_percent: float | None = None
    detail: str = ""


def _count(x: float) -> str:
    if abs(x) >= 1e6:
        return f"{x / 1e6:.2f}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.1f}K"
    return f"{x:g}"


def render(label: str, s: Status) -> str:
    parts = [f"{label}: {s.phase}"]
    if s.phase in (Phase.RUN, Phase.SAMPLING):
        parts.append(f"{s.elapsed_s:.0f}s")
        if s.window and s.remaining_s is not None and s.phase is Phase.RUN:
            parts.append(f"{s.window} window: {max(0.0, s.remaining_s):.0f}s left")
        shown = [
            f"{k} {_count(s.metrics[k])}" for k in PROGRESS_KEYS if s.metrics and k in s.metrics
        ]
        if shown:
            parts.append(", ".join(shown))
        elif s.phase is Phase.RUN:
            parts.append("no progress yet")
        if s.cpu_percent is not None:
            parts.append(f"tree CPU {s.cpu_percent:.0f}%")
    if s.detail:
        parts.append(s.detail)
    # the label is the watched command and a detail may quote the trainer: no controls
    return terminal_safe(" | ".join(parts))


class LiveProgress:
    """`phase()` at each stage, `update()` from the runner's ticks, `close()` before the
    summary. Never raises: progress must not break the run it reports on."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        every_s: float = 10.0,
        enabled: bool = True,
        terminal: bool | None = None,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.enabled = enabled
        self.status = Status()
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.terminal = is_tty if terminal is None else terminal
        self._live: Live | None = None
        self._last_line = time.monotonic()
        self._started = time.monotonic()
        # the last line printed without a terminal, and when it was first: a heartbeat that
        # found nothing new says so, not the same words again (read as a second event)
        self._printed = ""
        self._printed_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @classmethod
    def off(cls) -> LiveProgress:
        """Progress that shows nothing (--quiet, --json, a test): callers never check for
        None, they report to this."""
        return cls("", enabled=False)

    def _start_live(self) -> None:
        if self._live is None and self.enabled and self.terminal:
            console = Console(file=self.stream, highlight=False)
            self._live = Live(Text(""), console=console, transient=True, auto_refresh=False)
            self._live.start()

    def _emit(self, force: bool, beat: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if beat and now - self._last_line < self.every_s:
                return  # a line came while the heartbeat waited: it is not needed now
            line = render(self.label, self.status)
            try:
                if self.terminal:
                    self._start_live()
                    assert self._live is not None
                    self._live.update(Text(line), refresh=True)
                elif force or now - self._last_line >= self.every_s:
                    self._last_line = now
                    if line == self._printed:  # nothing new since: the phase still works
                        # whole seconds, or tenths when beats come faster (two beats
                        # rounded to the same second would print one line twice again)
                        later = f"{now - self._printed_at:.{0 if self.every_s >= 1 else 1}f}"
                        line += f" | still working, {later}s later"
                    else:
                        self._printed, self._printed_at = line, now
                    print(line, file=self.stream, flush=True)
            except (OSError, ValueError):  # a closed stream: stop reporting, never fail
                self.enabled = False

    def _beat(self) -> None:
        """Without a terminal: a line every every_s seconds even when nothing reports (a
        long build, a silent trainer), so that CI's no-output timeout never fires first."""
        while not self._stop.wait(min(1.0, self.every_s)):
            if time.monotonic() - self._last_line >= self.every_s:
                if self.status.phase in (Phase.RUN, Phase.SAMPLING):
                    self.status.elapsed_s += time.monotonic() - self._last_line
                self._emit(force=True, beat=True)

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None and self.enabled and not self.terminal:
            self._heartbeat = threading.Thread(target=self._beat, daemon=True, name="progress")
            self._heartbeat.start()

    def phase(self, name: Phase | TriageStep, detail: str = "") -> None:
        self.status.phase, self.status.detail = name, detail
        self.status.elapsed_s = time.monotonic() - self._started
        self._ensure_heartbeat()
        self._emit(force=name not in SETUP_PHASES or self.terminal)

    def update(
        self,
        elapsed_s: float,
        window: Trigger,
        remaining_s: float,
        metrics: dict[str, float],
        cpu_percent: float | None,
        phase: Phase = Phase.RUN,
    ) -> None:
        changed = phase != self.status.phase
        self.status = Status(phase, elapsed_s, window, remaining_s, metrics, cpu_percent)
        self._emit(force=changed)

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=2.0)
            self._heartbeat = None
        self._stop = threading.Event()
        if self._live is not None:
            with contextlib.suppress(OSError, ValueError):
                self._live.stop()
            self._live = None
