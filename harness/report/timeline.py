"""The run on one clock, seconds since launch, for report.html's timeline: when the watchdog
fired, the stacks were dumped and progress came (`moments`); every process and thread the
samples saw, with its state and CPU time at each look and its birth and exit when the watch
loop saw them (`processes`); where the whole tree was quiescent (`quiet_spans`).

Snapshots of the watch loop count from launch; those the sampler took after a trigger count
from the trigger, whose time is the limit itself for startup and wall, the watch loop's last
look otherwise, or (without a watch loop) the run's end less the sampling."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.report.model import Report
from harness.sampling.model import SampleSet
from harness.vocab import EventKind, Trigger


@dataclass
class Point:
    t: float  # seconds since launch
    state: str
    cpu_time: float | None
    wchan: str
    syscall: str = ""


@dataclass
class Lane:
    pid: int
    tid: int
    name: str
    points: dict[float, Point] = field(default_factory=dict)  # by t, rounded
    cpu_fraction: float | None = None
    waits: str = ""


@dataclass
class ProcRow:
    pid: int
    ppid: int | None
    name: str
    lanes: dict[int, Lane] = field(default_factory=dict)
    born: float | None = None
    died: float | None = None
    status: str = ""  # how it exited, when seen


@dataclass
class Moments:
    """When things happened, in seconds since launch (None: not known)."""

    end: float | None  # launch to verdict
    trigger: float | None  # the watchdog fired; the stacks are taken from here
    sample_end: float | None
    dumps: tuple[float, float] | None  # the stack tools ran from .. to
    progress: list[float]  # progress times the report knows
    all_progress_known: bool
    snapshot_offset: float  # add to a /proc snapshot's t for seconds since launch


def watched(s: SampleSet | None) -> bool:
    """Whether the samples come from the watch loop, whose snapshots count from launch."""
    return s is not None and s.watch is not None


def trigger_time(r: Report) -> float | None:
    """When the watchdog fired: the limit itself for startup and wall, else the last look
    of the watch loop, else the run's end less the sampling."""
    lim, s, t = r.limits, r.samples, r.timings
    if r.trigger in (None, Trigger.EXIT):
        return None
    if lim is not None and r.trigger == Trigger.STARTUP:
        return lim.startup_s
    if lim is not None and r.trigger == Trigger.WALL:
        return lim.wall_s
    if s is not None and watched(s) and (s.timeline or s.snapshots):
        # the watch loop's last look before the trigger (snapshots may add a few after it)
        looks = [p.t for p in s.timeline] or [snap.t for snap in s.snapshots]
        return max(looks)
    if t.run_s is not None:
        return max(0.0, t.run_s - (t.sampling_s or 0.0))
    return None


def moments(r: Report) -> Moments:
    s = r.samples
    trig = trigger_time(r)
    offset = 0.0 if watched(s) or trig is None else trig
    sample_end = dumps = None
    if s is not None and trig is not None:
        sample_end = trig + s.duration_s
        snaps = s.timings.get("snapshots")
        if snaps is None:
            snaps = 0.0 if watched(s) else max((x.t for x in s.snapshots), default=0.0)
        took = s.timings.get("stacks", max(s.duration_s - snaps, 0.0))
        dumps = (trig + snaps, trig + snaps + took)
    progress = []
    if r.timings.first_progress_s is not None:
        progress.append(r.timings.first_progress_s)
    known = len(progress) >= r.progress.progress_events
    return Moments(r.timings.run_s, trig, sample_end, dumps, progress, known, offset)


def processes(r: Report, m: Moments) -> list[ProcRow]:
    """Every process and thread the samples saw, in order of first sighting (main thread
    first), with its state and CPU time at each look, and its birth and exit if seen."""
    s = r.samples
    if s is None:
        return []
    procs: dict[int, ProcRow] = {}

    def lane(pid: int, tid: int, name: str = "") -> Lane:
        row = procs.get(pid)
        if row is None:
            row = procs[pid] = ProcRow(pid, None, "")
        found = row.lanes.get(tid)
        if found is None:
            found = row.lanes[tid] = Lane(pid, tid, name)
        elif name and not found.name:
            found.name = name
        return found

    for e in s.events:
        row = procs.setdefault(e.pid, ProcRow(e.pid, e.ppid, e.name))
        row.ppid, row.name = e.ppid, row.name or e.name
        if e.event == EventKind.START:
            row.born = e.t if row.born is None else min(row.born, e.t)
        elif e.event == EventKind.EXIT:
            row.died, row.status = e.t, e.status
    for point in s.timeline:
        key = round(point.t, 3)
        for rec in point.threads:
            if len(rec) < 4:
                continue
            wchan, syscall = (rec[4], rec[5]) if len(rec) > 5 else ("", "")
            points = lane(rec[0], rec[1]).points
            if key not in points:
                points[key] = Point(point.t, rec[2], rec[3], wchan, syscall)
    for snap in s.snapshots:
        t = m.snapshot_offset + snap.t
        for p in snap.processes:
            proc = procs.setdefault(p.pid, ProcRow(p.pid, p.ppid, p.name))
            proc.ppid, proc.name = p.ppid, p.name
            for th in p.threads:
                lane(p.pid, th.tid, th.name).points[round(t, 3)] = Point(
                    t, th.state, th.cpu_time, th.wchan, th.syscall
                )
    for st in s.stacks:  # a thread seen only by a stack tool
        lane(st.pid, st.tid, st.name)
        if not procs[st.pid].name and st.pid == st.tid:
            procs[st.pid].name = st.name
    for a in s.activity:
        lane(a.pid, a.tid, a.name).cpu_fraction = a.cpu_fraction
    for w in s.waits:
        lane(w.pid, w.tid).waits = f"{w.kind}: {w.what}"
    for row in procs.values():
        row.lanes = dict(sorted(row.lanes.items(), key=lambda kv: (kv[0] != row.pid, kv[0])))
    return list(procs.values())


def quiet_spans(s: SampleSet | None) -> list[tuple[float, float]]:
    """The stretches of the watch loop's timeline where the whole tree was quiescent."""
    spans: list[tuple[float, float]] = []
    points = sorted(s.timeline, key=lambda p: p.t) if s is not None else []
    for i, p in enumerate(points):
        if not p.quiet:
            continue
        t1 = points[i + 1].t if i + 1 < len(points) else p.t
        if spans and abs(spans[-1][1] - p.t) < 1e-6:
            spans[-1] = (spans[-1][0], t1)
        else:
            spans.append((p.t, t1))
    return spans
