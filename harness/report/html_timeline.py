"""report.html's timeline: one inline SVG, x in seconds since launch.

The upper band is the whole run: the watchdog windows shaded (startup, then stall, and the
quiescence window before a quiescent trigger), the progress ticks, process births and exits,
the spans where the tree was quiescent, the trigger, the sampling and its stack dumps, the
run's end. The lower band spans what the samples saw (joined to the upper one by a wedge when
it zooms in): one lane per thread, grouped by process, coloured by the thread's state, with
a bar for the CPU it used until the next look. The lanes come from the /proc snapshots and, when the
watch loop recorded one, its timeline over the whole run."""

from __future__ import annotations

import math

from harness.report.model import Report
from harness.report.timeline import (
    Lane,
    Moments,
    Point,
    ProcRow,
    moments,
    processes,
    quiet_spans,
    watched,
)
from harness.sampling.model import SampleSet
from harness.text import html_text as escape
from harness.vocab import Trigger

WIDTH = 1000
GUTTER = 210  # labels on the left
PLOT = WIDTH - GUTTER - 16
ROW = 18
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk wait",
    "T": "stopped",
    "t": "traced",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
}


# ---------------------------------------------------------------- drawing


def nice_step(span: float, target: int = 8) -> float:
    raw = max(span, 1e-9) / target
    mag = 10.0 ** math.floor(math.log10(raw))
    return next((k * mag for k in (1, 2, 5, 10) if k * mag >= raw), 10 * mag)


def seconds(t: float) -> str:
    return f"{t:.3g} s" if t < 10 else f"{t:.1f} s"


class Scale:
    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, max(hi, lo + 1e-6)

    def x(self, t: float) -> float:
        t = min(max(t, self.lo), self.hi)
        return round(GUTTER + (t - self.lo) / (self.hi - self.lo) * PLOT, 1)

    def ticks(self) -> list[float]:
        step = nice_step(self.hi - self.lo)
        first = math.ceil(self.lo / step) * step
        return [round(first + i * step, 9) for i in range(int((self.hi - first) / step) + 1)]


def _rect(x0: float, x1: float, y: float, h: float, cls: str, title: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    w = max(round(x1 - x0, 1), 1.0)
    return f'<rect class="{cls}" x="{x0}" y="{y}" width="{w}" height="{h}">{tip}</rect>'


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "") -> str:
    a = f' text-anchor="{anchor}"' if anchor else ""
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x}" y="{y}"{a}{c}>{escape(text)}</text>'


def _vline(x: float, y0: float, y1: float, cls: str, title: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return f'<line class="{cls}" x1="{x}" x2="{x}" y1="{y0}" y2="{y1}">{tip}</line>'


def _marker(x: float, y: float, cls: str, title: str) -> str:
    """A small triangle: pointing up for a birth, down for anything else."""
    if "birth" in cls:
        pts = f"{x - 4},{y + 4} {x + 4},{y + 4} {x},{y - 4}"
    else:
        pts = f"{x - 4},{y - 4} {x + 4},{y - 4} {x},{y + 4}"
    return f'<polygon class="{cls}" points="{pts}"><title>{escape(title)}</title></polygon>'


def _axis(sc: Scale, y: float, out: list[str], label: str) -> None:
    out.append(f'<line class="axis" x1="{GUTTER}" x2="{GUTTER + PLOT}" y1="{y}" y2="{y}"/>')
    for t in sc.ticks():
        x = sc.x(t)
        out.append(f'<line class="tick" x1="{x}" x2="{x}" y1="{y}" y2="{y + 4}"/>')
        out.append(_text(x, y + 15, f"{t:g}", "tl", "middle"))
    out.append(_text(GUTTER - 8, y + 15, label, "tl", "end"))


def _windows(r: Report, m: Moments) -> list[tuple[float, float, str, str]]:
    """The watchdog windows that were open: (from, to, css class, label)."""
    lim = r.limits
    if lim is None:
        return []
    out = []
    first = m.progress[0] if m.progress else None
    until = lim.startup_s if first is None else min(first, lim.startup_s)
    if m.trigger is not None:
        until = min(until, m.trigger)
    out.append((0.0, until, "win-startup", f"startup {lim.startup_s:g} s"))
    stall = f"stall {lim.stall_s:g} s"
    if r.trigger == Trigger.STALL and m.trigger is not None:
        out.append((max(m.trigger - lim.stall_s, 0.0), m.trigger, "win-stall", stall))
    elif m.progress and m.all_progress_known:
        last = m.progress[-1]
        end = m.trigger if m.trigger is not None else (m.end or last)
        out.append((last, min(last + lim.stall_s, max(end, last)), "win-stall", stall))
    if r.trigger == Trigger.QUIESCENT and m.trigger is not None and lim.quiescent_s > 0:
        a = max(m.trigger - lim.quiescent_s, 0.0)
        out.append((a, m.trigger, "win-quiet", f"quiescent {lim.quiescent_s:g} s"))
    return out


def _run_band(
    r: Report, m: Moments, procs: list[ProcRow], y: float, out: list[str]
) -> tuple[float, Scale]:
    """The whole run; returns the y below it and its scale."""
    lim = r.limits
    hi = max([m.end or 0.0, m.sample_end or 0.0, *m.progress, 1.0])
    if m.end is None and lim is not None:
        hi = max(hi, lim.startup_s)
    sc = Scale(0.0, hi * 1.02)
    spans = quiet_spans(r.samples)
    windows = _windows(r, m)
    quiet_window = [w for w in windows if w[2] == "win-quiet"]
    rows = ["watchdog", "quiescence", "progress", "processes", "harness"]
    if not spans and not quiet_window:
        rows.remove("quiescence")
    if not any(row.born is not None or row.died is not None for row in procs):
        rows.remove("processes")
    at = {label: y + i * ROW for i, label in enumerate(rows)}
    for label, ry in at.items():
        out.append(_text(GUTTER - 8, ry + 13, label, "lbl", "end"))
    top, bottom = y, y + len(rows) * ROW
    for a, b, cls, label in windows:
        wy = at["quiescence"] if cls == "win-quiet" else y
        out.append(_rect(sc.x(a), sc.x(b), wy + 2, ROW - 4, f"window {cls}", f"{label} window"))
        out.append(_text(sc.x(a) + 4, wy + 13, label, "wl"))
    if lim is not None and lim.wall_s <= sc.hi:
        out.append(_vline(sc.x(lim.wall_s), top, bottom, "wall", f"wall {lim.wall_s:g} s"))
    py = at["progress"]
    for t in m.progress:
        out.append(_vline(sc.x(t), py + 3, py + ROW - 3, "progress-tick", f"progress {t:.3f} s"))
    if not m.progress:
        out.append(_text(GUTTER + 4, py + 13, "no progress", "muted-t"))
    elif not m.all_progress_known:
        note = f"first progress at {seconds(m.progress[0])}; {r.progress.frames} frames in all"
        out.append(_text(sc.x(m.progress[-1]) + 6, py + 13, note, "muted-t"))
    for a, b in spans:
        qy = at["quiescence"]
        out.append(_rect(sc.x(a), sc.x(b), qy + ROW - 4, 3, "quiet", "tree quiescent"))
    for row in procs:
        what = f"pid {row.pid} {row.name}"
        if row.born is not None:
            tip = f"{what} started at {row.born} s"
            out.append(_marker(sc.x(row.born), at["processes"] + 9, "birth", tip))
        if row.died is not None:
            tip = f"{what} {row.status or 'exited'} at {row.died} s"
            out.append(_marker(sc.x(row.died), at["processes"] + 9, "death", tip))
    hy = at["harness"]
    if m.trigger is not None and m.sample_end is not None:
        out.append(_rect(sc.x(m.trigger), sc.x(m.sample_end), hy + 4, ROW - 8, "sampling"))
    if m.dumps is not None:
        _dumps(r.samples, m.dumps, sc, hy, out)
    if m.trigger is not None:
        x = sc.x(m.trigger)
        out.append(_vline(x, top, bottom, "trigger", f"{r.trigger} trigger at {m.trigger:.2f} s"))
        out.append(_text(x - 5, hy + 13, f"{r.trigger} trigger {seconds(m.trigger)}", "trg", "end"))
    if m.end is not None:
        ex = r.exit
        what = "killed by the harness" if ex and ex.killed_by_harness else "ended"
        if ex and not ex.killed_by_harness and ex.returncode is not None:
            what = f"exited {ex.returncode}"
        out.append(_vline(sc.x(m.end), top, bottom, "end", f"{what} at {m.end:.2f} s"))
    _axis(sc, bottom, out, "s since launch")
    return bottom + 22, sc


def _dumps(
    s: SampleSet | None, dumps: tuple[float, float], sc: Scale, y: float, out: list[str]
) -> None:
    tools = ", ".join(k for k, v in (s.tools if s else {}).items() if v == "used") or "none used"
    a, b = dumps
    tip = f"stack dumps ({tools}) {a:.2f}-{b:.2f} s"
    out.append(_rect(sc.x(a), sc.x(b), y + 2, ROW - 4, "dump", tip))
    out.append(_marker(sc.x(a), y - 1, "dump-mark", tip))


def _segments(points: list[Point], end: float) -> list[tuple[float, float, Point, float | None]]:
    """(from, to, point, cpu fraction until the next look): consecutive looks that agree
    (state, wait channel, CPU in quarters) are one segment."""
    segs: list[tuple[float, float, Point, float | None]] = []
    last: tuple[str, str, int] | None = None
    n = len(points)
    for i, p in enumerate(points):
        nxt = points[i + 1] if i + 1 < n else None
        t1 = nxt.t if nxt else max(end, p.t)
        frac = None
        if nxt and p.cpu_time is not None and nxt.cpu_time is not None and nxt.t > p.t:
            frac = min(max((nxt.cpu_time - p.cpu_time) / (nxt.t - p.t), 0.0), 1.0)
        look = (p.state, p.wchan, -1 if frac is None else round(frac * 4))
        if look == last:
            a, _, q, f = segs[-1]
            segs[-1] = (a, t1, q, f)
            continue
        last = look
        segs.append((p.t, t1, p, frac))
    return segs


def _lane(lane: Lane, sc: Scale, y: float, h: float, idx: int, end: float, out: list[str]) -> None:
    main = " (main)" if lane.tid == lane.pid else ""
    cpu = f", cpu {lane.cpu_fraction:.0%}" if lane.cpu_fraction is not None else ""
    waits = f"; waits: {lane.waits}" if lane.waits else ""
    out.append(f'<g class="lane" data-pid="{lane.pid}" data-tid="{lane.tid}">')
    bg = "lane-bg odd" if idx % 2 else "lane-bg"
    out.append(f'<rect class="{bg}" x="{GUTTER}" y="{y}" width="{PLOT}" height="{h}"/>')
    tip = f"pid {lane.pid} tid {lane.tid} '{lane.name}'{main}{cpu}{waits}"
    out.append(
        f'<text x="{GUTTER - 8}" y="{y + h - 3.5}" text-anchor="end" class="tn">'
        f"<title>{escape(tip)}</title>{escape(f'tid {lane.tid} {lane.name}{main}')}</text>"
    )
    points = sorted(lane.points.values(), key=lambda p: p.t)
    for t0, t1, p, frac in _segments(points, end):
        state = p.state if p.state in STATES else "q"
        cpu_txt = f", cpu {frac:.0%}" if frac is not None else ""
        wchan = f" in {p.wchan}" if p.wchan else ""
        tip = f"tid {lane.tid} {t0:.2f}-{t1:.2f} s: {p.state} {STATES.get(p.state, '?')}"
        x0, x1 = sc.x(t0), sc.x(t1)
        out.append(_rect(x0, x1, y + 2, h - 4, f"st st-{state}", tip + wchan + cpu_txt))
        if frac:
            bar = round((h - 4) * frac, 1)
            out.append(_rect(x0, x1, y + h - 2 - bar, bar, "cpu"))
    out.append("</g>")


def _lanes_band(
    r: Report, m: Moments, procs: list[ProcRow], run_sc: Scale, y: float, out: list[str]
) -> float:
    """The threads, over the span the samples cover; returns the y below."""
    times = [p.t for row in procs for lane in row.lanes.values() for p in lane.points.values()]
    times += [t for t in (m.trigger, m.sample_end) if t is not None]
    if not procs or not times:
        return y
    lo, hi = min(times), max(times)
    pad = max((hi - lo) * 0.03, 0.05)
    sc = Scale(max(lo - pad, 0.0), hi + pad)
    zoomed = sc.lo > run_sc.lo + 0.05 * (run_sc.hi - run_sc.lo) or sc.hi < 0.9 * run_sc.hi
    axis_y = y + 22 if zoomed else y - 8
    if zoomed:
        out.append(
            f'<polygon class="zoom" points="{run_sc.x(sc.lo)},{y - 22} '
            f'{run_sc.x(sc.hi)},{y - 22} {GUTTER + PLOT},{axis_y} {GUTTER},{axis_y}"/>'
        )
    _axis(sc, axis_y, out, "threads: s since launch")
    hy = axis_y + 22
    out.append(_text(GUTTER - 8, hy + 13, "harness", "lbl", "end"))
    if m.dumps is not None:
        _dumps(r.samples, m.dumps, sc, hy, out)
    nlanes = sum(len(row.lanes) for row in procs)
    h = ROW if nlanes <= 24 else 13
    top = y = hy + ROW
    idx = 0
    end = m.dumps[0] if m.dumps is not None else hi
    for row in procs:
        parent = f" ← {row.ppid}" if row.ppid is not None else ""
        out.append(f'<g class="proc" data-pid="{row.pid}">')
        out.append(_text(8, y + h - 3, f"pid {row.pid} {row.name}{parent}", "pn"))
        if row.born is not None or row.died is not None:
            a = row.born if row.born is not None else sc.lo
            b = row.died if row.died is not None else sc.hi
            out.append(_rect(sc.x(a), sc.x(b), y + h / 2 - 1, 2, "life", "process alive"))
        for t, cls in ((row.born, "birth"), (row.died, "death")):
            if t is not None:
                tip = f"pid {row.pid} {row.status if cls == 'death' else 'started'} at {t} s"
                out.append(_marker(sc.x(t), y + h / 2, cls, tip))
        out.append("</g>")
        y += h
        for lane in row.lanes.values():
            _lane(lane, sc, y, h, idx, end, out)
            idx += 1
            y += h
    if r.samples is not None and not r.samples.timeline:
        for snap in r.samples.snapshots:
            t = m.snapshot_offset + snap.t
            out.append(_vline(sc.x(t), top, y, "snap", f"snapshot at {t:.2f} s"))
    if m.trigger is not None:
        out.append(_vline(sc.x(m.trigger), hy, y, "trigger", f"{r.trigger} trigger"))
    return y + 6


def render_timeline(r: Report) -> str:
    """The timeline section's body: the SVG and its legend."""
    m = moments(r)
    procs = processes(r, m)
    out: list[str] = []
    y, run_sc = _run_band(r, m, procs, 8.0, out)
    y = _lanes_band(r, m, procs, run_sc, y + 30, out)
    nlanes = sum(len(row.lanes) for row in procs)
    svg = (
        f'<svg id="timeline-svg" class="timeline" viewBox="0 0 {WIDTH} {round(y + 4)}" '
        f'role="img" aria-label="timeline of the run, {nlanes} thread lanes" '
        f'data-lanes="{nlanes}">' + "".join(out) + "</svg>"
    )
    swatches = "".join(
        f'<span class="sw st-{k}"></span>{escape(k)} {escape(v)} ' for k, v in STATES.items()
    )
    legend = (
        '<p class="legend"><span class="sw win-startup"></span>startup window '
        '<span class="sw win-stall"></span>stall window <span class="sw win-quiet"></span>'
        'quiescence window <span class="sw quiet"></span>tree quiescent '
        '<span class="sw sampling"></span>sampling <span class="sw dump"></span>stack dumps '
        '<span class="sw trigger-sw"></span>trigger <span class="sw cpu"></span>CPU used '
        f"▲ start ▼ exit · states: {swatches}</p>"
    )
    notes = []
    if r.limits is not None and r.limits.wall_s > run_sc.hi:
        notes.append(f"wall limit {r.limits.wall_s:g} s: beyond the run")
    if (
        m.trigger is not None
        and r.trigger not in (Trigger.STARTUP, Trigger.WALL)
        and not watched(r.samples)
    ):
        notes.append("the trigger's time is the run's end less the sampling time")
    if r.samples is not None and not r.samples.timeline:
        notes.append("threads were looked at only after the trigger (dotted lines)")
    note = f'<p class="muted">{escape("; ".join(notes))}</p>' if notes else ""
    return svg + legend + note
