"""Continuous watching: while the command runs, every thread of its tree is read from /proc
on a cadence (state, CPU, wchan, syscall and its arguments), process births and exits are
noted, and each snapshot is judged by the quiescence rule (`quiescence`, docs/quiescence.md).

The runner feeds it from its poll loop (`tick`), so it needs no thread and no lock. At a
trigger the activity history is already there: the sampler takes stacks at once.

Memory is bounded whatever the run's length: the last RECENT_SNAPSHOTS snapshots in full
(about 6 s at the default cadence), the older timeline (watch/history.py) and at most
MAX_EVENTS process events.
"""

from __future__ import annotations

import platform
import resource
import time
from collections import deque
from dataclasses import replace

from harness.sampling import procfs
from harness.sampling.model import (
    ProcessEvent,
    SampleSet,
    Snapshot,
    TimelinePoint,
    WakeChain,
    WatchInfo,
)
from harness.sampling.waits import ThreadWait
from harness.watch import wakegraph
from harness.watch.closedwatch import ClosedWatch, by_key, settled
from harness.watch.deadlines import CallClock
from harness.watch.history import TIMELINE_POINTS, OlderPoints, point
from harness.watch.housekeeping import Look, between_wakeups, library_frames, stack_check
from harness.watch.pollloops import PollLoops, substitute
from harness.watch.quiescence import (
    BLOCKED_KINDS,
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
    pending_locks,
    pending_polls,
    table_for,
    tree_waits,
    woke,
)
from harness.watch.treefacts import FactReader, late_waits, process_io
from harness.watch.treewalk import MAX_EVENTS, TreeWalk, describe_status

__all__ = ["MAX_EVENTS", "TIMELINE_POINTS", "WATCH_INTERVAL_S", "WatchLoop", "describe_status"]

# 0.25 s: the quiescence verdict comes at most this late, the last second before a trigger
# holds 4-5 snapshots, and a 64-thread tree costs well under 1% of a core (quiescence.md).
WATCH_INTERVAL_S = 0.25
RECENT_SNAPSHOTS = 24
OPEN_FILES = 512  # /proc files kept open (at most a quarter of the fd limit)
ACTIVITY_WINDOW_S = 1.0  # the history a trigger's sample takes its CPU activity from
CONFIRM_TRIES = 6  # a tracer that just detached may leave a thread runnable for a moment


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
        self._older = OlderPoints(interval)
        self.notes: list[str] = []
        self.snapshots = 0
        self.cpu_s = 0.0
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
        self._facts = FactReader(run_started=launched_at)
        # threads of a watcher's own inside the tree (the pytest plugin's listener): left
        # out of the rule, kept in the timeline and the stacks
        self.ignore: set[tuple[int, int]] = set()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = OPEN_FILES if soft == resource.RLIM_INFINITY else min(OPEN_FILES, soft // 4)
        self.files = procfs.ProcFiles(limit)
        self.tree = TreeWalk(root_pid, launched_at, self.files, self.notes)
        self._closed = ClosedWatch()  # the wake graph's closed set over looks
        # time.monotonic() of the run's wall limit, set by the runner: a timed wait whose
        # deadline lies past it counts as blocked (watch/deadlines.py); None: no limit
        self.limit_at: float | None = None
        self._calls_since = CallClock()  # since when each thread is in its call
        # polling loops resolved to the lock they poll (watch/pollloops.py)
        self._polls = PollLoops()

    @property
    def events(self) -> list[ProcessEvent]:
        return self.tree.events

    @property
    def events_dropped(self) -> int:
        return self.tree.events_dropped

    @property
    def skip(self) -> set[int]:
        """Processes never walked into (TreeWalk.skip)."""
        return self.tree.skip

    @skip.setter
    def skip(self, pids: set[int]) -> None:
        self.tree.skip = pids

    @property
    def closed_since(self) -> float | None:
        """time.monotonic() since which a closed set of the wake graph has held (once it
        has held for closedwatch.CLOSED_LOOKS looks), or None."""
        since = self._closed.ready_since() if self.judging else None
        return None if since is None else self.launched_at + since

    @property
    def closed_members(self) -> frozenset[tuple[int, int]]:
        return self._closed.members

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
        snap = Snapshot(t=round(now - self.launched_at, 3), processes=self.tree.walk(now))
        self.tree.note_threads(snap)
        judged, self._calls, restarted = continued(self._judged_part(snap), self.table, self._calls)
        prev_t = None if self._judged is None else self.launched_at + self._judged.t
        self._calls_since.look(judged, prev_t)
        quiet = self._judge(judged, self._judged, output_at, restarted)
        self._judged = judged
        self.recent.append((snap, point(snap, quiet, self.table)))
        self._older.keep(self.recent[-1][1])
        self.snapshots += 1
        self.cpu_s += time.thread_time() - cpu0
        return snap

    def new_pids(self) -> list[int]:
        """Processes first seen since the last call (for the runner's kill list)."""
        return self.tree.new_pids()

    def recent_window(self, seconds: float = ACTIVITY_WINDOW_S) -> list[Snapshot]:
        snaps = [s for s, _ in self.recent]
        if not snaps:
            return []
        return [s for s in snaps if s.t >= snaps[-1].t - seconds - 1e-6]

    def root_exited(self, returncode: int, now: float) -> None:
        self.tree.root_exited(returncode, now)

    def close(self) -> None:
        self.stop_tracing()
        self.files.close()

    def stop_tracing(self) -> None:
        """End a polling loop's trace under way (before a stack dump: one tracer a thread)."""
        self._polls.close()

    def reset_quiet(self) -> None:
        self._since = None
        self._closed.reset()
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
            snap, waits = self._fresh_look()
            if not is_blocked(waits):
                busy = [tw for tw, w in waits if w.kind not in BLOCKED_KINDS]
                why = f"tid {busy[0].tid}: {busy[0].what}" if busy else "no live thread"
                continue
            hk = [(tw.pid, tw.tid) for tw, _ in waits if tw.kind == HOUSEKEEPING]
            moved = woke(before, snap, cpu_slack=0.05, runs=False, ignore=hk)
            return moved if moved is not None else self._confirm_stacks(hk, samples)
        return why

    def _fresh_look(self) -> tuple[Snapshot, list[tuple[ThreadWait, Wait]]]:
        """The tree read and judged afresh after the stack dump, its facts (outside holders
        too) and its threads' run counts read anew."""
        now = time.monotonic()
        raw = self._judged_part(Snapshot(round(now - self.launched_at, 3), self.tree.walk(now)))
        # the dump's tracer interrupted the waits: a poll resumes as restart_syscall
        snap, _, restarted = continued(raw, self.table, self._calls)
        self._facts.reset()  # look at outside holders afresh
        self._read_runs(snap)  # housekeeping is judged by its wake-ups, here too
        first = tree_waits(snap, self.table, restarted=restarted)
        waits, _ = self._judge_facts(snap, first, list(self._looks), restarted)
        return snap, substitute(snap, waits, self._polls.targets())

    def confirm_closed(self) -> str | None:
        """After the stack dump, for a closed-set trigger: None when the set is still closed
        on fresh facts (outside holders scanned afresh) and its threads are as they were
        (a tracer's attach forgiven), else why not."""
        members = self._closed.members
        why = "not checked"
        for attempt in range(CONFIRM_TRIES):
            if attempt:
                time.sleep(0.05)
            snap, waits = self._fresh_look()
            keyed = by_key(waits)
            closed = wakegraph.closed_set(snap, keyed)
            if not members <= closed:
                out = sorted(members - closed)[0]
                w = keyed.get(out)
                why = f"tid {out[1]} is no longer in a closed set: {w.what if w else 'gone'}"
                continue
            moved = self._closed.confirm(snap)
            if moved is not None:
                return moved
            self._waits, self._judged = waits, snap
            return None
        return why

    def wake_chain(self, slept: dict[tuple[int, int], Wait] | None = None) -> WakeChain | None:
        """The chain from the thread the user sees waiting to its end, over the last look's
        waits (watch/wakegraph.py); None before any look. `slept`: the threads caught
        between two wake-ups (`_between_wakeups`), when the caller has them already."""
        snap = self._judged
        if snap is None or self.table is None:
            return None
        # a timed loop caught between two wake-ups is asleep on its timer: the chain ends
        # timed (unless it is a polling loop resolved to the lock it polls)
        slept = self._between_wakeups() if slept is None else slept
        loops = self._polls.targets()
        slept = {k: w for k, w in slept.items() if k not in loops}
        waits = {**by_key(self._waits), **slept}
        closed = self._closed.members or wakegraph.closed_set(snap, waits)
        start = wakegraph.start_of(snap, waits, self.root, closed)
        if start is None:
            return None
        deaths = wakegraph.deaths(self.events)
        return wakegraph.chain(snap, waits, start, self.root, closed, self.tree.gone, deaths)

    def _confirm_stacks(
        self, excused: list[tuple[int, int]], samples: SampleSet | None
    ) -> str | None:
        """Each excused thread's stacks at the dump: the program's own code (or no stack)
        withdraws it for the rest of the run, and with it the verdict."""
        stacks = samples.stacks if samples is not None else []
        for key in excused:
            known = self.tree.known(key[0])
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
        loops = self._polls.targets()
        slept = {k: w for k, w in self._between_wakeups().items() if k not in loops}
        samples.waits = [_asleep(tw, slept.get((tw.pid, tw.tid))) for tw, _ in self._waits]
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
        samples.wake = self.wake_chain(slept)
        samples.notes.extend(n for n in self.notes if n not in samples.notes)

    def _between_wakeups(self) -> dict[tuple[int, int], Wait]:
        """The threads runnable at the reported look between two wake-ups of their timed
        loops, with the sleep each was last seen in (housekeeping.between_wakeups). The
        reported look is the last judged one, which a closed set's confirmation reads
        afresh without keeping it among the looks."""
        if self._judged is None:
            return {}
        looks = [look for look in self._looks if look.snap.t < self._judged.t]
        return between_wakeups([*looks, Look(self._judged, by_key(self._waits))])

    def timeline(self) -> list[TimelinePoint]:
        recent = [p for _, p in self.recent]
        first = recent[0].t if recent else float("inf")
        return [p for p in self.history if p.t < first] + recent

    @property
    def history(self) -> list[TimelinePoint]:
        """The older points kept (watch/history.py), oldest first."""
        return self._older.points

    def _judged_part(self, snap: Snapshot) -> Snapshot:
        """The snapshot without the ignored threads (the rule's view of it)."""
        if not self.ignore:
            return snap
        procs = [
            replace(p, threads=[t for t in p.threads if (p.pid, t.tid) not in self.ignore])
            for p in snap.processes
        ]
        return replace(snap, processes=procs)

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
        late: set[tuple[int, int]] = set()
        timed = {(tw.pid, tw.tid) for tw, w in waits if w.pending == "deadline"}
        # a timed wait past the run's limit is read alone, and only when it could decide the
        # facts; a timed loop may be a polling loop (watch/pollloops.py). Both only under a
        # wall limit: a run the harness started, not attach nor the pytest plugin
        wall = self.judging and self.limit_at is not None
        if wall and timed and needs_facts(waits, self._withdrawn, timed):
            late = late_waits(snap, self.table, timed, self._calls_since.starts(), self.limit_at)
            late |= self._polls.candidates(snap, timed, self._withdrawn)
        with_facts = self.judging and (
            needs_facts(waits, self._withdrawn, late) or settled(waits, prev, snap)
        )
        if with_facts:
            self._read_runs(snap)
            waits, look = self._judge_facts(snap, waits, list(self._looks), restarted)
        if wall and (with_facts or self._polls.busy):
            # a timed loop beside a blocked tree: traced once, resolved to the lock it polls
            waits = self._polls.judge(snap, waits, self._withdrawn, self.tree.tools)
        self._waits = waits
        self._looks.append(look)
        if not self.judging:
            return False
        # the wake graph: a set of threads only each other can wake, judged on facts only
        closed = wakegraph.closed_set(snap, by_key(waits)) if with_facts else frozenset()
        loops = set(self._polls.targets())
        self._closed.look(snap, closed, loops)
        quiet = is_blocked(waits)
        out = None if output_at is None else output_at - self.launched_at
        hk = [
            (tw.pid, tw.tid)
            for tw, _ in waits
            if tw.kind == HOUSEKEEPING or (tw.pid, tw.tid) in loops
        ]
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
        compat = {p.pid for p in snap.processes if (k := self.tree.known(p.pid)) and k.bits32}
        facts: TreeFacts = self._facts.read(
            snap,
            self.table,
            pending_fds(first),
            pending_polls(first),
            compat,
            locked=pending_locks(first),
            futexes=True,
            starts=self._calls_since.starts(),
            limit_at=self.limit_at,
        )
        live = [p.pid for p in snap.processes if any(t.state not in "ZX" for t in p.threads)]
        io = process_io(live)
        return judge(snap, self.table, facts, history, io, restarted, self._withdrawn)


def _asleep(tw: ThreadWait, w: Wait | None) -> ThreadWait:
    """The report's wait of a thread runnable between two wake-ups: the sleep it was last
    seen in (`w`), said to be so; unchanged when it is not such a thread."""
    if w is None:
        return tw
    what = f"{w.what} (runnable at the last look, between two wake-ups)"
    return replace(tw, kind=w.kind, what=what, on=w.on, idle=True, via=w.via)
