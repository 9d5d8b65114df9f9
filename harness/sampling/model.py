"""What a sample of a process tree holds: per-thread /proc snapshots, per-thread activity
across them, and the stacks the tools produced. Plain dataclasses, JSON-able as a whole."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Frame:
    function: str  # "env_start", "pthread_mutex_lock", "gomp_team_barrier_wait_end", "??"
    module: str | None = None  # mapped file path, e.g. "/usr/lib/x86_64-linux-gnu/libgomp.so.1"
    file: str | None = None  # source file as the tool printed it (may be relative)
    line: int | None = None
    # the traced program's own code (main executable, a file or module under own_roots,
    # a Python file outside the stdlib/site-packages), not a runtime library
    own: bool = False


@dataclass
class ThreadStack:
    pid: int
    tid: int
    name: str
    frames: list[Frame]  # innermost first
    source: str  # "gdb" | "eu-stack" | "py-spy"
    python: bool = False  # True for py-spy stacks


@dataclass
class ThreadSample:
    tid: int
    name: str  # comm
    state: str  # R S D T t Z X I, from /proc/PID/task/TID/stat
    wchan: str  # kernel wait channel ("futex_do_wait", "do_wait"); "" when running/hidden
    syscall: str  # syscall number as text, "running", or "" if unreadable
    cpu_time: float  # utime+stime seconds


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
    t: float  # seconds since sampling began
    processes: list[ProcessSample]


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
    timings: dict[str, float] = field(default_factory=dict)


def to_json(s: SampleSet) -> dict[str, Any]:
    """A plain JSON-able dict of the whole sample set."""
    return dataclasses.asdict(s)
