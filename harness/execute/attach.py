"""Watching a process tree the harness did not start (`harness attach PID`, the pytest
plugin's watcher): the same watch loop, quiescence rule and stack sampling as a run, with
three differences that follow from not being the parent.

- The root's exit status belongs to its own parent: an exit is seen as the pid vanishing.
- Nothing is launched, so nothing is killed: the target runs on after the look unless the
  caller asks otherwise (`kill_tree`).
- Tracing may be refused (yama's ptrace_scope, another user, a container without
  SYS_PTRACE). `ptrace_refusal` asks the kernel the same question ptrace would, without
  stopping anything: opening /proc/PID/mem needs PTRACE_MODE_ATTACH, the access a stack
  tool's attach needs. Refused, the sample is /proc only (states, wchan, syscalls where
  readable, the tree) and the report says in one line what would allow stacks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.execute.runner import SampleOptions
from harness.process import proctree
from harness.sampling import procfs
from harness.sampling.model import SampleSet
from harness.sampling.sample import sample_tree
from harness.sampling.tools import NONE
from harness.vocab import Trigger
from harness.watch.watchdog import CLOSED_CONFIRM_S
from harness.watch.watchloop import WATCH_INTERVAL_S, WatchLoop

CAP_SYS_PTRACE = 19
POLL_S = 0.1
KILL_WAIT_S = 5.0  # --kill: how long the killed tree may take to die


def visible(pid: int) -> bool:
    """A process of this PID namespace (not a zombie we could not look into)."""
    return pid > 0 and Path(f"/proc/{pid}/stat").exists()


def _uids(pid: int) -> tuple[int, int] | None:
    """The real and effective uid of `pid` (/proc/PID/status Uid: real effective …)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    real, eff = line.split()[1:3]
                    return int(real), int(eff)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _has_cap(cap: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _yama_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return None


def ptrace_refusal(pid: int) -> str | None:
    """None when a stack tool may attach to `pid`, else one line: why not, and what would
    allow it. Asked of the kernel (opening /proc/PID/mem checks ptrace's attach access,
    yama included); the reason is read from the uids, the capability and ptrace_scope."""
    try:
        with open(f"/proc/{pid}/mem", "rb"):
            return None
    except FileNotFoundError:
        return f"pid {pid} is gone"
    except OSError as exc:
        err = exc.strerror or str(exc)
    who = _uids(pid)
    mine = os.geteuid()
    privileged = _has_cap(CAP_SYS_PTRACE)
    scope = _yama_scope()
    if who is not None and mine not in who and not privileged:
        if mine == 0:  # root without the capability: a container, or a dropped bounding set
            return (
                f"ptrace refused ({err}): pid {pid} runs as uid {who[1]} and the harness, root, "
                "lacks CAP_SYS_PTRACE; run it as that user, or give it the capability (a "
                "container: --cap-add=SYS_PTRACE)"
            )
        return (
            f"ptrace refused ({err}): pid {pid} runs as uid {who[1]}, the harness as uid "
            f"{mine}; stacks need the same user or root (sudo harness attach {pid})"
        )
    if scope == 3:
        return (
            f"ptrace refused ({err}): kernel.yama.ptrace_scope is 3 (no attaching at all, "
            "until reboot); stacks are not possible on this host"
        )
    if scope == 2 and not privileged:
        return (
            f"ptrace refused ({err}): kernel.yama.ptrace_scope is 2 (only with "
            f"CAP_SYS_PTRACE); run as root (sudo harness attach {pid})"
        )
    if scope == 1 and not privileged:
        return (
            f"ptrace refused ({err}): kernel.yama.ptrace_scope is 1 (only a parent may "
            f"trace); run as root (sudo harness attach {pid}) or set "
            "`sudo sysctl kernel.yama.ptrace_scope=0`"
        )
    if not privileged and Path("/.dockerenv").exists():
        return (
            f"ptrace refused ({err}): a container without CAP_SYS_PTRACE; start it with "
            "--cap-add=SYS_PTRACE"
        )
    return f"ptrace refused ({err}): stacks need CAP_SYS_PTRACE or the target's own user"


@dataclass
class Observer:
    """The tree of `pid` as the watch loop sees it, look by look; `ignore` are threads of
    the watcher's own in the tree (the pytest plugin's listener), left out of the
    quiescence rule (they are still in the stacks and the timeline)."""

    pid: int
    quiescent_s: float
    ignore: set[tuple[int, int]] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)
    interval_s: float = WATCH_INTERVAL_S  # between looks at the tree
    loop: WatchLoop = field(init=False)
    # every process seen in the tree (psutil handles: a reused pid is never signalled)
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loop = WatchLoop(
            self.pid, self.started, quiescence=self.quiescent_s > 0, interval=self.interval_s
        )
        self.loop.ignore = self.ignore
        # the watcher itself, should the tree have adopted it (a subreaper in it)
        self.loop.skip = {os.getpid()}

    def watch_group(self) -> None:
        """When the target leads its process group, the group is its run: a daemon or a
        background job that left the tree but not the group (the harness is no subreaper
        here, so orphans go elsewhere) is watched with it."""
        if procfs.process_group(self.pid) == self.pid:
            self.loop.tree.group = self.pid

    def look(self, now: float | None = None) -> None:
        self.loop.tick(time.monotonic() if now is None else now)
        for pid in self.loop.new_pids():  # for --kill: members that outlive the root
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(pid, psutil.Process(pid))

    @property
    def gone(self) -> bool:
        """The root has exited (or is a zombie its parent has not reaped yet)."""
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def quiet_for(self, now: float | None = None) -> float:
        since = self.loop.quiet_since
        return 0.0 if since is None else (time.monotonic() if now is None else now) - since

    def reset(self) -> None:
        """Forget the quiet run (the tree changed meaning: a new test began)."""
        self.loop.reset_quiet()

    def quiescent(self, now: float | None = None) -> bool:
        return self.quiescent_s > 0 and self.quiet_for(now) >= self.quiescent_s

    def closed(self, now: float | None = None) -> bool:
        """A closed set of the wake graph has held for its confirmation window."""
        since = self.loop.closed_since
        if self.quiescent_s <= 0 or since is None:
            return False
        return (time.monotonic() if now is None else now) - since >= CLOSED_CONFIRM_S

    def confirm_closed(self) -> str | None:
        """The closed set still holds after the stack dump (None), or why not."""
        return self.loop.confirm_closed()

    def sample(self, sampling: SampleOptions, refusal: str | None) -> SampleSet:
        """Stacks now (/proc only when tracing is refused), CPU activity from the loop's
        recent looks."""
        native, python = sampling.native, sampling.python
        if refusal is not None:
            native = python = NONE
        samples = sample_tree(
            self.pid,
            snapshots=sampling.snapshots,
            interval=sampling.interval_s,
            stack_timeout=sampling.stack_timeout_s,
            native=native,
            python=python,
            own_roots=sampling.own_roots,
            history=self.loop.recent_window(),
            origin=self.started,
        )
        if refusal is not None:
            samples.notes.append(f"no stacks: {refusal}")
        return samples

    def confirm(self, samples: SampleSet) -> str | None:
        """Still as quiescent after the stack dump (None), or why not."""
        return self.loop.confirm(samples)

    def finish(self, samples: SampleSet) -> None:
        self.loop.annotate(samples)

    def close(self) -> None:
        self.loop.close()

    def wait_quiescent(self, duration_s: float) -> Trigger:
        """Look until the tree is quiescent, the root exits or `duration_s` passes; which
        happened: QUIESCENT, CLOSED, EXIT or DURATION."""
        end = self.started + duration_s
        while True:
            now = time.monotonic()
            if self.gone:
                return Trigger.EXIT
            self.look(now)
            if self.quiescent(now):
                return Trigger.QUIESCENT
            if self.closed(now):
                return Trigger.CLOSED
            if now >= end:
                return Trigger.DURATION
            time.sleep(min(POLL_S, WATCH_INTERVAL_S, max(0.0, end - now)))


def tree_written(pids: Collection[int]) -> dict[int, int]:
    """Bytes each process has written so far (/proc/PID/io wchar: every write, output,
    logs, pipes); the processes whose counters cannot be read (another user's) are left
    out."""
    out: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            out[pid] = psutil.Process(pid).io_counters().write_chars
    return out


def written_since(before: dict[int, int], now: dict[int, int]) -> int | None:
    """Bytes written between two readings by the processes of the second (a process born
    since counts whole; one that exited took its count with it, which is no negative
    progress); None when neither reading read anything."""
    if not before and not now:
        return None
    return sum(max(0, n - before.get(pid, 0)) for pid, n in now.items())


def tree_pids(pid: int) -> list[int]:
    with contextlib.suppress(psutil.Error):
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    return []


def kill_tree(pid: int, seen: Collection[psutil.Process] = ()) -> proctree.KillReport:
    """--kill: the target, every descendant and every process seen in its tree (an orphan
    of a root that exited while watched), SIGKILL, after the report. They are not our
    children: their parents reap them (or init does)."""
    procs: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    known = {p.pid for p in procs}
    for p in seen:
        with contextlib.suppress(psutil.Error):
            if p.pid not in known and p.is_running():  # is_running: not a reused pid
                procs += [p, *p.children(recursive=True)]
                known |= {q.pid for q in procs}
    killed: list[int] = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
            killed.append(p.pid)
    # not our children: dead is gone or a zombie its own parent has yet to reap (waiting
    # for the pid to vanish would wait on that parent)
    deadline = time.monotonic() + KILL_WAIT_S
    alive = procs
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S / 2)
        alive = [p for p in alive if proctree.living(p)]
    return proctree.KillReport(killed=killed, reaped=[], leftover=[p.pid for p in alive])
