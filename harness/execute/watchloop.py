"""Continuous watching: while the command runs, every thread of its tree is read from /proc
on a cadence (state, CPU, wchan, syscall and its arguments), process births and exits are
noted, and each snapshot is judged by the quiescence rule (`quiescence`, docs/quiescence.md).

The runner feeds it from its poll loop (`tick`), so it needs no thread and no lock. At a
trigger the activity history is already there: the sampler takes stacks at once.

Memory is bounded whatever the run's length: the last RECENT_SNAPSHOTS snapshots in full
(about 6 s at the default cadence), a timeline of at most TIMELINE_POINTS older points
thinned by halving (each point at most POINT_THREADS compact thread records), and at most
MAX_EVENTS process events.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

import psutil

from harness.execute.housekeeping import Look, library_frames, stack_check
from harness.execute.quiescence import (
    HOUSEKEEPING,
    Calls,
    SyscallTable,
    TreeFacts,
    Wait,
    advance,
    continued,
    is_blocked,
    judge,
    needs_facts,
    pending_fds,
    pending_polls,
    syscall_name,
    table_for,
    tree_waits,
    woke,
)
from harness.execute.treefacts import FactReader, process_io
from harness.process import signals
from harness.sampling import procfs
from harness.sampling.model import (
    ProcessEvent,
    ProcessSample,
    SampleSet,
    Snapshot,
    ThreadSample,
    ThreadWait,
    TimelinePoint,
    WatchInfo,
)
from harness.vocab import EventKind

# 0.25 s: the quiescence verdict comes at most this late, the last second before a trigger
# holds 4-5 snapshots (CPU use per thread without sampling anew), and a 64-thread tree
# costs well under 1% of a core (docs/quiescence.md has the measurement).
WATCH_INTERVAL_S = 0.25
RECENT_SNAPSHOTS = 24
TIMELINE_POINTS = 120
POINT_THREADS = 256
MAX_EVENTS = 1000
OPEN_FILES = 512  # /proc files kept open (at most a quarter of the fd limit)
ACTIVITY_WINDOW_S = 1.0  # the history a trigger's sample takes its CPU activity from
CONFIRM_TRIES = 6  # a tracer that just detached may leave a thread runnable for a moment
_STATUS = {
    "R": "running",
    "S": "sleeping",
    "D": "disk-sleep",
    "T": "stopped",
    "t": "tracing-stop",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
}


@dataclass
class _Known:
    ppid: int
    name: str
    exe: str
    cmdline: list[str]
    is_python: bool
    bits32: bool
    exited: bool = False


def describe_status(status: int) -> str:
    """A wait status as words: "exited 0", "killed by SIGKILL (core dumped)"."""
    return signals.from_wait_status(status).words()


class WatchLoop:
    """The tree of `root_pid` (and orphans of it adopted by this process, the subreaper)."""

    def __init__(
        self,
        root_pid: int,
        launched_at: float,
        *,
        quiescence: bool = True,
        interval: float = WATCH_INTERVAL_S,
        machine: str | None = None,
    ) -> None:
        self.root = root_pid
        self.launched_at = launched_at  # time.monotonic() at launch: the snapshots' zero
        self.interval = interval
        arch = machine or platform.machine()
        self.table: SyscallTable | None = table_for(arch)
        self.judging = quiescence and self.table is not None
        if self.table is None:
            self.quiescence = f"off: syscall numbers of {arch or 'this machine'} are not known"
        elif not quiescence:
            self.quiescence = "off (--quiescent 0)"
        else:
            self.quiescence = f"on ({self.table.arch})"
        self.recent: deque[tuple[Snapshot, TimelinePoint]] = deque(maxlen=RECENT_SNAPSHOTS)
        self.history: list[TimelinePoint] = []
        self._spacing = interval
        self.events: list[ProcessEvent] = []
        self.events_dropped = 0
        self.notes: list[str] = []
        self.snapshots = 0
        self.cpu_s = 0.0
        self._known: dict[int, _Known] = {}
        self._births: list[int] = []
        self._next = launched_at
        self._since: float | None = None  # start of the quiet run, seconds since launch
        self._waits: list[tuple[ThreadWait, Wait]] = []
        # each thread's last syscall before a restart_syscall, and the last snapshot as the
        # rule judged it (restarted syscalls continued: quiescence.continued)
        self._calls: Calls = {}
        self._judged: Snapshot | None = None
        self._looks: deque[Look] = deque(maxlen=RECENT_SNAPSHOTS)  # for housekeeping
        # threads whose stack at a dump showed the program's own code: never excused again
        # in this run (the program's own timed loop is the program working)
        self._withdrawn: set[tuple[int, int]] = set()
        self._facts = FactReader()
        # threads of a watcher's own inside the tree (the pytest plugin's listener): left
        # out of the rule, kept in the timeline and the stacks
        self.ignore: set[tuple[int, int]] = set()
        # processes never walked into (nor their descendants): a watcher that a subreaper
        # in the tree adopted (the pytest plugin's, when pytest is a subreaper)
        self.skip: set[int] = set()
        self._no_children_file = False
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = OPEN_FILES if soft == resource.RLIM_INFINITY else min(OPEN_FILES, soft // 4)
        self.files = procfs.ProcFiles(limit)

    # ------------------------------------------------------------ the runner's interface

    @property
    def quiet_since(self) -> float | None:
        """time.monotonic() since which the tree has been quiescent, or None."""
        if not self.judging or self._since is None:
            return None
        return self.launched_at + self._since

    def tick(self, now: float, output_at: float | None = None) -> Snapshot | None:
        """Take a snapshot if one is due. `output_at`: monotonic time of the last output."""
        if now < self._next:
            return None
        self._next = max(self._next + self.interval, now + self.interval / 2)
        return self.take(now, output_at)

    def take(self, now: float | None = None, output_at: float | None = None) -> Snapshot:
        cpu0 = time.thread_time()
        now = time.monotonic() if now is None else now
        snap = Snapshot(t=round(now - self.launched_at, 3), processes=self._walk(now))
        judged, self._calls, restarted = continued(self._judged_part(snap), self.table, self._calls)
        quiet = self._judge(judged, self._judged, output_at, restarted)
        self._judged = judged
        self.recent.append((snap, self._point(snap, quiet)))
        self._keep_history(self.recent[-1][1])
        self.snapshots += 1
        self.cpu_s += time.thread_time() - cpu0
        return snap

    def new_pids(self) -> list[int]:
        """Processes first seen since the last call (for the runner's kill list)."""
        births, self._births = self._births, []
        return births

    def recent_window(self, seconds: float = ACTIVITY_WINDOW_S) -> list[Snapshot]:
        snaps = [s for s, _ in self.recent]
        if not snaps:
            return []
        return [s for s in snaps if s.t >= snaps[-1].t - seconds - 1e-6]

    def root_exited(self, returncode: int, now: float) -> None:
        known = self._known.get(self.root)
        if known is not None and not known.exited:
            known.exited = True
            self._event(now, EventKind.EXIT, self.root, known, signals.from_returncode(returncode))

    def close(self) -> None:
        self.files.close()

    def reset_quiet(self) -> None:
        self._since = None
        self._facts.reset()
        self._looks.clear()  # housekeeping needs consecutive looks, too

    def confirm(self, samples: SampleSet | None = None) -> str | None:
        """After the stack dump: None when the tree is still exactly as quiescent as before
        it (a tracer's attach forgiven) and every thread excused as housekeeping shows only
        runtime and library code in the dump's stacks (`samples`; none: no thread is
        excused), else why not."""
        before = self._judged
        if before is None:
            return "no snapshot to compare with"
        why = "not checked"
        for attempt in range(CONFIRM_TRIES):
            if attempt:
                time.sleep(0.05)
            raw = self._judged_part(
                Snapshot(
                    round(time.monotonic() - self.launched_at, 3), self._walk(time.monotonic())
                )
            )
            # the dump's tracer interrupted the waits: a poll resumes as restart_syscall
            snap, _, restarted = continued(raw, self.table, self._calls)
            self._facts.reset()  # look at outside holders afresh
            self._read_runs(snap)  # housekeeping is judged by its wake-ups, here too
            first = tree_waits(snap, self.table, restarted=restarted)
            waits, _ = self._judge_facts(snap, first, list(self._looks), restarted)
            if not is_blocked(waits):
                busy = [tw for tw, w in waits if w.kind not in ("tree", "done", "housekeeping")]
                why = f"tid {busy[0].tid}: {busy[0].what}" if busy else "no live thread"
                continue
            hk = [(tw.pid, tw.tid) for tw, _ in waits if tw.kind == HOUSEKEEPING]
            moved = woke(before, snap, cpu_slack=0.05, runs=False, ignore=hk)
            return moved if moved is not None else self._confirm_stacks(hk, samples)
        return why

    def _confirm_stacks(
        self, excused: list[tuple[int, int]], samples: SampleSet | None
    ) -> str | None:
        """Each excused thread's stacks at the dump: the program's own code (or no stack)
        withdraws it for the rest of the run, and with it the verdict."""
        stacks = samples.stacks if samples is not None else []
        for key in excused:
            known = self._known.get(key[0])
            why = stack_check(key, stacks, known is not None and known.is_python)
            if why is not None:
                self._withdrawn.add(key)
                return f"{why}: a timed wake-up of the program's own is not housekeeping"
        found = {k: library_frames(k, stacks) for k in excused}
        self._waits = [
            (replace(tw, what=f"{tw.what}; {found[k]}"), w)
            if (k := (tw.pid, tw.tid)) in found
            else (tw, w)
            for tw, w in self._waits
        ]
        return None

    def annotate(self, samples: SampleSet) -> None:
        """Put the timeline, the events and what each thread waits on into a sample set."""
        samples.timeline = self.timeline()
        samples.events = list(self.events)
        samples.waits = [tw for tw, _ in self._waits]
        for tw in samples.waits:
            if tw.kind == HOUSEKEEPING:  # the evidence says which threads were excused
                self.notes.append(f"pid {tw.pid} tid {tw.tid} not counted: {tw.what}")
        samples.watch = WatchInfo(
            interval_s=self.interval,
            snapshots=self.snapshots,
            quiescence=self.quiescence,
            cpu_s=round(self.cpu_s, 3),
            events_dropped=self.events_dropped,
        )
        samples.notes.extend(n for n in self.notes if n not in samples.notes)

    def timeline(self) -> list[TimelinePoint]:
        recent = [p for _, p in self.recent]
        first = recent[0].t if recent else float("inf")
        return [p for p in self.history if p.t < first] + recent

    def _judged_part(self, snap: Snapshot) -> Snapshot:
        """The snapshot without the ignored threads (the rule's view of it)."""
        if not self.ignore:
            return snap
        procs = [
            replace(p, threads=[t for t in p.threads if (p.pid, t.tid) not in self.ignore])
            for p in snap.processes
        ]
        return replace(snap, processes=procs)

    # ------------------------------------------------------------ reading the tree

    def _roots(self) -> list[int]:
        """The root, and orphans of the tree this process (the subreaper) adopted."""
        adopted = []
        me = os.getpid()
        for tid in procfs.task_ids(me):
            for child in procfs.task_children(me, tid) or []:
                known = self._known.get(child)
                if child != self.root and known is not None and not known.exited:
                    adopted.append(child)
        return [self.root, *adopted]

    def _walk(self, now: float) -> list[ProcessSample]:
        out: list[ProcessSample] = []
        stack: list[tuple[int, int | None]] = [(pid, None) for pid in reversed(self._roots())]
        seen: set[int] = set()
        while stack:
            pid, parent = stack.pop()
            if pid in seen or pid in self.skip:
                continue
            seen.add(pid)
            found = self._read_process(pid, parent, now)
            if found is None:
                continue
            proc, children = found
            out.append(proc)
            stack.extend((c, pid) for c in reversed(children))
        self.files.sweep({(p.pid, t.tid) for p in out for t in p.threads})
        for pid, known in self._known.items():
            if pid not in seen and not known.exited:
                known.exited = True
                self._event(now, EventKind.EXIT, pid, known, signals.UNKNOWN)
        return out

    def _children(self, pid: int, tids: Iterable[int]) -> list[int]:
        if self._no_children_file:
            return _psutil_children(pid)
        children: list[int] = []
        for tid in tids:
            found = procfs.task_children(pid, tid, self.files)
            if found is None:
                self._no_children_file = True
                self.notes.append("no /proc/PID/task/TID/children: the tree is read via psutil")
                return _psutil_children(pid)
            children += found
        return children

    def _read_process(
        self, pid: int, parent: int | None, now: float
    ) -> tuple[ProcessSample, list[int]] | None:
        tids = procfs.task_ids(pid)
        threads = [t for tid in tids if (t := procfs.read_thread(pid, tid, self.files))]
        if not threads:
            return None
        main = next((t for t in threads if t.tid == pid), threads[0])
        known = self._known.get(pid)
        reborn = known is not None and known.exited and main.state not in "ZX"  # pid reused
        if known is None or reborn:
            known = self._learn(pid, parent, threads)
            self._births.append(pid)
            self._event(now, EventKind.START, pid, known, None)
        elif known.name != main.name:  # exec'd since
            known = self._learn(pid, parent, threads, known)
        self._known[pid] = known
        if main.state == "Z" and all(t.state in "ZX" for t in threads) and not known.exited:
            known.exited = True
            status = procfs.zombie_status(pid)
            ending = signals.from_wait_status(status) if status is not None else signals.UNKNOWN
            self._event(now, EventKind.EXIT, pid, known, ending)
        proc = ProcessSample(
            pid=pid,
            ppid=known.ppid,
            name=main.name,
            exe=known.exe,
            cmdline=known.cmdline,
            status=_STATUS.get(main.state, main.state),
            is_python=known.is_python,
            threads=threads,
        )
        return proc, self._children(pid, [t.tid for t in threads])

    def _learn(
        self,
        pid: int,
        parent: int | None,
        threads: list[ThreadSample],
        old: _Known | None = None,
    ) -> _Known:
        ppid = parent if parent is not None else procfs.process_ppid(pid)
        live = procfs.live_tid(pid, threads)
        exe, cmdline = procfs.exe_cmdline(pid, live) if live is not None else ("", [])
        main = next((t for t in threads if t.tid == pid), threads[0])
        return _Known(
            ppid=ppid if ppid is not None else (old.ppid if old else 0),
            name=main.name,
            exe=exe,
            cmdline=cmdline,
            is_python=procfs.is_python(exe, cmdline),
            bits32=procfs.is_32bit(pid),
            exited=old.exited if old else False,
        )

    def _event(
        self, now: float, kind: EventKind, pid: int, known: _Known, end: signals.Ending | None
    ) -> None:
        """A start (`end` None) or an exit, with how it ended as data and as words."""
        if len(self.events) >= MAX_EVENTS:
            self.events_dropped += 1
            return
        t = round(now - self.launched_at, 3)
        event = ProcessEvent(t, kind, pid, known.ppid, known.name)
        if end is not None:
            event.status = end.words()
            event.exit_code, event.signal, event.status_known = end.exit_code, end.signal, end.known
        self.events.append(event)

    # ------------------------------------------------------------ judging

    def _judge(
        self,
        snap: Snapshot,
        prev: Snapshot | None,
        output_at: float | None,
        restarted: set[tuple[int, int]],
    ) -> bool:
        if self.table is None:
            return False
        waits = tree_waits(snap, self.table, restarted=restarted)
        look = Look(snap, {(tw.pid, tw.tid): w for tw, w in waits})
        if self.judging and needs_facts(waits, self._withdrawn):
            self._read_runs(snap)
            waits, look = self._judge_facts(snap, waits, list(self._looks), restarted)
        self._waits = waits
        self._looks.append(look)
        if not self.judging:
            return False
        quiet = is_blocked(waits)
        out = None if output_at is None else output_at - self.launched_at
        hk = [(tw.pid, tw.tid) for tw, _ in waits if tw.kind == HOUSEKEEPING]
        # the outside scan is not dropped on a look that is not quiet: it expires by itself
        # when the tree's processes change, and after treefacts.OUTSIDE_REFRESH_S
        self._since = advance(self._since, prev, snap, quiet, out, hk)
        return quiet

    def _read_runs(self, snap: Snapshot) -> None:
        for proc in snap.processes:
            for th in proc.threads:
                th.runs = procfs.thread_runs(proc.pid, th.tid, self.files)

    def _judge_facts(
        self,
        snap: Snapshot,
        first: list[tuple[ThreadWait, Wait]],
        history: list[Look],
        restarted: set[tuple[int, int]],
    ) -> tuple[list[tuple[ThreadWait, Wait]], Look]:
        """The waits by the whole rule: the facts of the fds, timers and I/O read."""
        compat = {p.pid for p in snap.processes if (k := self._known.get(p.pid)) and k.bits32}
        facts: TreeFacts = self._facts.read(
            snap, self.table, pending_fds(first), pending_polls(first), compat
        )
        live = [p.pid for p in snap.processes if any(t.state not in "ZX" for t in p.threads)]
        io = process_io(live)
        return judge(snap, self.table, facts, history, io, restarted, self._withdrawn)

    # ------------------------------------------------------------ the timeline

    def _point(self, snap: Snapshot, quiet: bool) -> TimelinePoint:
        rows = [
            (p.pid, t.tid, t.state, round(t.cpu_time, 2), t.wchan, syscall_name(t, self.table))
            for p in snap.processes
            for t in p.threads
        ]
        rows.sort(key=lambda r: (r[0], r[1]))
        extra = max(0, len(rows) - POINT_THREADS)
        return TimelinePoint(snap.t, quiet, rows[:POINT_THREADS], extra)

    def _keep_history(self, point: TimelinePoint) -> None:
        """Older points at a spacing that doubles whenever the history is full."""
        if self.history and point.t - self.history[-1].t < self._spacing - 1e-6:
            return
        self.history.append(point)
        if len(self.history) > TIMELINE_POINTS:
            self.history = self.history[::2]
            self._spacing *= 2


def _psutil_children(pid: int) -> list[int]:
    """Direct children without /proc/.../children (kernels without CONFIG_PROC_CHILDREN)."""
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []
