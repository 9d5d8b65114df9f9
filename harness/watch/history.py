"""The run's timeline as the watch loop keeps it: one compact point a look (each thread's
state, CPU, wchan and syscall name), the older ones thinned by halving so that a run of any
length keeps at most TIMELINE_POINTS of them (report.html's timeline, samples.timeline)."""

from __future__ import annotations

from harness.sampling.model import Snapshot, TimelinePoint
from harness.watch.syscalls import SyscallTable, syscall_name

TIMELINE_POINTS = 120
POINT_THREADS = 256  # thread records a point keeps at most (the rest are counted)


def point(snap: Snapshot, quiet: bool, table: SyscallTable | None) -> TimelinePoint:
    """One look as a timeline point."""
    rows = [
        (p.pid, t.tid, t.state, round(t.cpu_time, 2), t.wchan, syscall_name(t, table))
        for p in snap.processes
        for t in p.threads
    ]
    rows.sort(key=lambda r: (r[0], r[1]))
    extra = max(0, len(rows) - POINT_THREADS)
    return TimelinePoint(snap.t, quiet, rows[:POINT_THREADS], extra)


class OlderPoints:
    """Older points at a spacing that doubles whenever the history is full."""

    def __init__(self, spacing: float) -> None:
        self.points: list[TimelinePoint] = []
        self._spacing = spacing

    def keep(self, new: TimelinePoint) -> None:
        if self.points and new.t - self.points[-1].t < self._spacing - 1e-6:
            return
        self.points.append(new)
        if len(self.points) > TIMELINE_POINTS:
            self.points = self.points[::2]
            self._spacing *= 2
