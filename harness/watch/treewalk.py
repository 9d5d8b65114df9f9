"""Reading the watched tree from /proc at each look (the watch loop's first half): every
process of the run and its threads, births and exits with their statuses, and the
processes the run started that left its tree (docs/quiescence.md, "The watched set")."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from harness.process import signals
from harness.sampling import procfs
from harness.sampling.model import ProcessEvent, ProcessSample, Snapshot, ThreadSample
from harness.vocab import EventKind

MAX_EVENTS = 1000
GROUP_SCAN_S = 2.0  # a scan of every process for the run's group: at most this often
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


class TreeWalk:
    """The processes of one run: the tree of `root`, and the processes it started that
    this process (a child subreaper) adopted."""

    def __init__(
        self, root: int, launched_at: float, files: procfs.ProcFiles, notes: list[str]
    ) -> None:
        self.root = root
        self.launched_at = launched_at
        self.files = files
        self.notes = notes
        self.events: list[ProcessEvent] = []
        self.events_dropped = 0
        self._known: dict[int, _Known] = {}
        self._births: list[int] = []
        # processes never walked into (nor their descendants): a watcher that a subreaper
        # in the tree adopted (the pytest plugin's, when pytest is a subreaper)
        self.skip: set[int] = set()
        # this process's own children when the run started (its reaper, a load): every
        # later child of this process other than them was adopted from the run
        self.own: set[int] | None = None
        # the harness's own tools started while the run is watched (a polling loop's
        # tracer): children of this process, never members of the run
        self.tools: set[int] = set()
        # a process group whose every member belongs to the run (`harness attach` on a
        # group leader: the processes that left its tree but not its group), and the last
        # scan of /proc for them (kept GROUP_SCAN_S)
        self.group: int | None = None
        self._grouped: list[int] = []
        self._grouped_at: float | None = None
        self._no_children_file = False
        # pid → threads that exited while it lives on (a helper thread that died), and
        # the live threads of each process at the last look
        self.gone: dict[int, list[int]] = {}
        self._tids: dict[int, set[int]] = {}

    def note_threads(self, snap: Snapshot) -> None:
        """Threads that exited while their process lives on (a helper thread that died):
        the end of a chain that finds nobody left to wake a wait."""
        for proc in snap.processes:
            tids = {t.tid for t in proc.threads if t.state not in ("Z", "X")}
            before = self._tids.get(proc.pid)
            if before is not None and len(self.gone) < 256:
                lost = self.gone.setdefault(proc.pid, [])
                lost += [t for t in sorted(before - tids) if t not in lost][: 16 - len(lost)]
                if not lost:
                    del self.gone[proc.pid]
            if len(self._tids) < 1024 or proc.pid in self._tids:
                self._tids[proc.pid] = tids

    def known(self, pid: int) -> _Known | None:
        return self._known.get(pid)

    def new_pids(self) -> list[int]:
        births, self._births = self._births, []
        return births

    def root_exited(self, returncode: int, now: float) -> None:
        known = self._known.get(self.root)
        if known is not None and not known.exited:
            known.exited = True
            self._event(now, EventKind.EXIT, self.root, known, signals.from_returncode(returncode))

    def _roots(self) -> list[int]:
        """The root, and orphans of the tree this process (the subreaper) adopted: those
        seen in the tree before, and, when this process's own children are known (`own`),
        every other child of it — a daemon or a background job the run started whose
        parent exited before any look saw it (a shell's `cmd &`, a double fork)."""
        adopted = []
        me = os.getpid()
        for tid in procfs.task_ids(me):
            for child in procfs.task_children(me, tid) or []:
                if child == self.root or child in adopted or child in self.tools:
                    continue
                known = self._known.get(child)
                seen_before = known is not None and not known.exited
                unseen = known is None and self.own is not None and child not in self.own
                if seen_before or unseen:
                    adopted.append(child)
        return [self.root, *adopted, *self._group_members(adopted)]

    def _group_members(self, roots: list[int]) -> list[int]:
        if self.group is None:
            return []
        now = time.monotonic()
        if self._grouped_at is None or now - self._grouped_at >= GROUP_SCAN_S:
            me = os.getpid()
            self._grouped = [
                p
                for p in procfs.all_pids()
                if p != me and p != self.root and procfs.process_group(p) == self.group
            ]
            self._grouped_at = now
        return [p for p in self._grouped if p not in roots]

    def walk(self, now: float) -> list[ProcessSample]:
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


def _psutil_children(pid: int) -> list[int]:
    """Direct children without /proc/.../children (kernels without CONFIG_PROC_CHILDREN)."""
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []
