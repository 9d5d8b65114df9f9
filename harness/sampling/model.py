"""What a sample of a process tree holds: per-thread /proc snapshots, per-thread activity
across them, and the stacks the tools produced. Plain dataclasses, JSON-able as a whole."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Discriminator, Tag

from harness.jsonvalues import Measured
from harness.sampling.ranks import ProcessRank
from harness.sampling.waits import ThreadWait
from harness.vocab import EventKind, StackToolName, WaitVia, WakeEnd


@dataclass
class Frame:
    function: str  # "env_start", "pthread_mutex_lock", "gomp_team_barrier_wait_end", "??"
    module: str | None = None  # mapped file path, e.g. "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
    file: str | None = None  # source file as the tool printed it (may be relative)
    line: int | None = None
    # the traced program's own code (main executable, a file or module under own_roots,
    # a Python file outside the stdlib/site-packages), not a runtime library
    own: bool = False
    # the runtime the module IS, by its ELF identity (SONAME, exported symbols), when the
    # sampler knows it: "libgomp" for a wheel's renamed libgomp-1a2b3c4d.so.1 too; None: not
    # examined; "": an ELF file of none of the known runtimes
    runtime: str | None = None


@dataclass
class InlinedFrame(Frame):
    """A frame the compiler inlined into the next (outer) frame of the stack: no call of
    its own, same code address as its caller; its file:line is where it was executing
    (innermost) or where it called the frame above it. JSON carries `"inline": true`."""

    inline: bool = True


def _frame_kind(value: Any) -> str:
    """Which frame a JSON object (or an object) is: an inlined one carries `inline`."""
    inline = "inline" in value if isinstance(value, dict) else isinstance(value, InlinedFrame)
    return "inlined" if inline else "frame"


if TYPE_CHECKING:
    AnyFrame = Frame
else:  # report.load reads a stack's frames as the one its keys name
    AnyFrame = Annotated[
        Annotated[Frame, Tag("frame")] | Annotated[InlinedFrame, Tag("inlined")],
        Discriminator(_frame_kind),
    ]


@dataclass
class ThreadStack:
    pid: int
    tid: int
    name: str
    frames: list[AnyFrame]  # innermost first
    source: StackToolName
    python: bool = False  # True for py-spy stacks


@dataclass
class ThreadSample:
    tid: int
    name: str  # comm
    state: str  # R S D T t Z X I, from /proc/PID/task/TID/stat
    wchan: str  # kernel wait channel ("futex_do_wait", "do_wait"); "" when running/hidden
    syscall: str  # syscall number as text, "running", or "" if unreadable
    cpu_time: float  # utime+stime seconds
    # the six raw arguments of that syscall (from /proc/PID/task/TID/syscall), when in one
    syscall_args: list[int] = field(default_factory=list)
    # times the thread was put on a CPU (schedstat); the watch loop reads it only while the
    # tree looks blocked, to tell "never woke up" from "woke up between two looks"
    runs: int | None = None


@dataclass
class ProcessSample:
    pid: int
    ppid: int
    name: str
    exe: str  # read through a live thread when the main thread is a zombie
    cmdline: list[str]
    status: str  # psutil status: "zombie" when only the MAIN THREAD has exited, too
    is_python: bool  # exe or argv[0] basename is python*
    threads: list[ThreadSample]


@dataclass
class Snapshot:
    t: float  # seconds since sampling began (watch-loop snapshots: since launch)
    processes: list[ProcessSample]


# One thread at one moment of the timeline: (pid, tid, state, cpu seconds, wchan, syscall),
# syscall as a name ("futex", "wait4", "read", "running", "" unreadable, "#N" unknown).
TimelineThread = tuple[int, int, str, Measured, str, str]


@dataclass
class TimelinePoint:
    """The whole tree at one moment of the run, compact."""

    t: float  # seconds since launch
    quiet: bool  # every live thread was blocked on the tree (docs/quiescence.md)
    threads: list[TimelineThread]
    more_threads: int = 0  # threads left out of this point (a point keeps at most 256)


@dataclass
class ProcessEvent:
    """A process of the tree seen for the first time, or seen gone."""

    t: float  # seconds since launch (when the watch loop noticed)
    event: EventKind
    pid: int
    ppid: int
    name: str
    # exits, for people (report.json keeps it): "exited 0", "exited 3", "killed by SIGKILL",
    # "exited, status unknown"; what it says is in the three fields below
    status: str = ""
    exit_code: int | None = None  # the exit code of a process that exited by itself
    signal: int | None = None  # the signal that killed it
    # the watch loop saw how it ended (a zombie's status, the root's returncode); False for
    # a start, and for a process that vanished between two looks, reaped by someone else
    status_known: bool = False


@dataclass
class WakeLink:
    """One thread of a wake chain: what it waits on and who alone could end it."""

    pid: int
    tid: int
    name: str  # the thread's name (comm)
    what: str  # the wait, in words (ThreadWait.what)
    on: str = ""
    wakers: list[int] = field(default_factory=list)  # the processes that could end it
    note: str = ""  # how the process belongs to the run, when it left the tree
    # what kind of object it waits on: a pipe, a socket, a file lock, a mutex, … (the wake
    # graph's readings, the wake-chain causes, match on it)
    via: WaitVia = WaitVia.OTHER


# how a verdict's evidence names the chain (the summary shows it on its own `chain` row)
WAKE_EVIDENCE = "wake chain: "


@dataclass
class WakeChain:
    """The chain from the thread the user sees waiting to where it ends (the wake graph,
    watch/wakegraph.py): each link waits on something only the next can end."""

    links: list[WakeLink]
    end: WakeEnd
    end_what: str  # the end, in words
    end_pid: int | None = None
    end_tid: int | None = None
    # the closed set (a trigger `closed`, or found at another trigger): [pid, tid] pairs
    closed: list[list[int]] = field(default_factory=list)
    # an end at a polling loop whose syscalls were traced: what it polls, in words
    # (sampling/polltrace.py); "" when not traced
    polled: str = ""
    # [pid, tid] of threads of the chain's processes that exited while the run was watched
    # (a helper thread that died may be what a cycle's threads wait for)
    lost: list[list[int]] = field(default_factory=list)

    def text(self, calls: Mapping[tuple[int, int], str] | None = None) -> str:
        """`pid 1 tid 1 (python) waits on … held by pid 2 → … → ends: nobody: …`; with
        `calls`, each link says where its thread waits in the program's terms
        (`in Popen.communicate at t.py:3`: analysis/waitchain.program_calls)."""
        calls = calls or {}
        parts = [
            f"pid {k.pid} tid {k.tid} ({k.name})"
            + (f" in {calls[(k.pid, k.tid)]}:" if (k.pid, k.tid) in calls else "")
            + f" {k.what}"
            + (f" [{k.note}]" if k.note else "")
            for k in self.links
        ]
        end = f"ends: {self.end.value}: {self.end_what}"
        if not parts and self.end_pid is not None:  # the waiting thread is the end itself
            end = f"pid {self.end_pid} tid {self.end_tid} {end}"
        return " → ".join([*parts, end])


@dataclass
class WatchInfo:
    """How the run was watched before the trigger."""

    interval_s: float  # cadence of the watch loop
    snapshots: int  # snapshots taken over the run
    quiescence: str  # "on (x86_64)" | "off: <why>"
    cpu_s: float  # CPU time the watch loop itself used
    events_dropped: int = 0  # events beyond the bound, not kept


@dataclass
class LockLink:
    """One step of a mutex wait-for cycle: a thread, the mutex it waits for, its owner."""

    tid: int
    name: str
    mutex: str  # the mutex's address in the process ("0x…"), or "?" when not known
    owner: int  # the thread that holds it (the next step's tid)
    owner_name: str


@dataclass
class LockCycle:
    pid: int
    links: list[LockLink]


# A thread spins (is busy) when it used at least BUSY_FRACTION of a core between snapshots,
# or was runnable (R) at every look and got at least RUNNABLE_FRACTION: on a loaded machine a
# spinning thread may get well under half a core, but it never sleeps. classify's mechanism
# and the spin-on-blocked-workers detector read the same rule.
BUSY_FRACTION = 0.5
RUNNABLE_FRACTION = 0.05


def spinning(
    states: list[str],
    cpu_fraction: float,
    busy_fraction: float = BUSY_FRACTION,
    runnable_fraction: float = RUNNABLE_FRACTION,
) -> bool:
    always_runnable = bool(states) and all(state == "R" for state in states)
    return cpu_fraction >= busy_fraction or (always_runnable and cpu_fraction >= runnable_fraction)


@dataclass
class ThreadActivity:
    """One thread across all snapshots it was seen in."""

    pid: int
    tid: int
    name: str
    states: list[str]
    cpu_fraction: float  # CPU seconds between first and last sighting / wall seconds
    wchan: str  # from the last snapshot
    syscall: str  # from the last snapshot


@dataclass
class SampleSet:
    snapshots: list[Snapshot]
    activity: list[ThreadActivity]
    stacks: list[ThreadStack]
    # tool → "used" | "missing" | "failed: <why>" | "ptrace denied" | "timeout"
    # (the worst outcome over all processes; the per-process story is in notes)
    tools: dict[str, str]
    notes: list[str]  # degradations, one line each
    duration_s: float
    # tool output per "tool:pid", for the report's stacks file (truncated)
    raw: dict[str, str] = field(default_factory=dict)
    # seconds spent per phase: "snapshots", "stacks"
    timings: dict[str, Measured] = field(default_factory=dict)
    # from the watch loop (empty when the sample was taken without one): the tree over the
    # run (older points thinned out), process births and exits, what each thread waits on
    timeline: list[TimelinePoint] = field(default_factory=list)
    events: list[ProcessEvent] = field(default_factory=list)
    waits: list[ThreadWait] = field(default_factory=list)
    watch: WatchInfo | None = None
    # pthread mutex wait-for cycles found while the tree was still alive (sampling/locks.py)
    lock_cycles: list[LockCycle] = field(default_factory=list)
    # each rank's place in a distributed job (sampling/ranks.py), read while the processes live
    ranks: list[ProcessRank] = field(default_factory=list)
    # who could wake the waiting threads, from the first waiting thread to the end of the
    # chain (watch/wakegraph.py); None without a watch loop or when nothing waits
    wake: WakeChain | None = None


def to_json(s: SampleSet) -> dict[str, Any]:
    """A plain JSON-able dict of the whole sample set."""
    return dataclasses.asdict(s)
