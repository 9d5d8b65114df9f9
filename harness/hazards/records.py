"""The records the two recorders left in a run's hazards folder, read back bounded: every
`native-<pid>.log` (the shim's text records, data/hazards/hazards.c says their grammar) and
every `python-<pid>.jsonl` (the hook's JSON lines). Only regular files directly in the folder
are read (no link is followed), each to a size cap (the rest of a larger file is left, with a
note), at most MAX_FILES of them; a line that does not parse is skipped and counted, never an
error."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.contain import open_regular
from harness.errors import HarnessError

MAX_FILES = 512
FILE_CAP = 8 << 20  # the shim stops writing at 8 MiB a process
_NAME = re.compile(r"(native|python)-(\d+)\.(log|jsonl)")


@dataclass
class Mapping:
    start: int
    end: int
    offset: int
    perms: str
    path: str


@dataclass
class ChildDid:
    """What the child of a fork did before any exec (a C record)."""

    what: str  # omp: a parallel region began; lock: it took a mutex held at the fork
    arg: int  # the team asked for, or the mutex
    site: int  # the return address of the call
    main: bool  # on the forking thread (the child's first) rather than a thread it started


@dataclass
class Fork:
    pid: int
    seq: int
    tid: int
    tasks: int
    team: int  # the largest team an OMPT runtime (libomp, libiomp5) was asked for, 0: none
    stack: list[int] = field(default_factory=list)
    threads: list[tuple[int, int, str]] = field(default_factory=list)  # tid, start, name
    held: list[tuple[int, int, int]] = field(default_factory=list)  # tid, lock, site
    child: int = 0  # the child's pid, 0 when it wrote nothing
    child_did: list[ChildDid] = field(default_factory=list)
    child_exec: bool = False


@dataclass
class Edge:
    pid: int
    tid: int
    thread: str  # the thread's name when it took `taken`
    held: tuple[int, int]  # the mutex's address and generation (a new mutex at an old address)
    taken: tuple[int, int]
    held_site: int
    taken_site: int
    stack: list[int] = field(default_factory=list)


@dataclass
class Process:
    pid: int
    ppid: int = 0
    exe: str = ""
    images: int = 0  # I records: 2 or more, or 1 for a forked child, means it exec'd
    maps: list[Mapping] = field(default_factory=list)


@dataclass
class Records:
    processes: dict[int, Process] = field(default_factory=dict)
    forks: list[Fork] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    py_forks: list[dict[str, Any]] = field(default_factory=list)
    py_children: list[dict[str, Any]] = field(default_factory=list)
    py_edges: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # the shim's D records
    unreadable: list[str] = field(default_factory=list)
    bad_lines: int = 0

    def process(self, pid: int) -> Process:
        return self.processes.setdefault(pid, Process(pid))


@dataclass
class _Pending:
    """Child records (P, C, X) by the child's pid, joined to their fork once all is read: a
    child writes into its parent's file, and after an exec into its own."""

    parent: dict[int, tuple[int, int]] = field(default_factory=dict)  # child -> (ppid, seq)
    did: dict[int, list[ChildDid]] = field(default_factory=dict)
    execs: set[int] = field(default_factory=set)


def _int(word: str) -> int:
    return int(word, 0)


def _native_line(rec: Records, line: str, forks: dict[tuple[int, int], Fork], p: _Pending) -> None:
    kind, _, rest = line.partition(" ")
    # M and I end in a path: spaces allowed there
    parts = rest.split(" ", 6 if kind == "M" else 2) if kind in ("M", "I") else rest.split()
    if kind == "D":
        rec.dropped.append(f"{parts[1]} (pid {parts[0]})")
        return
    pid = int(parts[0])
    if kind == "I":
        proc = rec.process(pid)
        proc.ppid, proc.exe, proc.maps = int(parts[1]), parts[2], []  # a new image
        proc.images += 1
    elif kind == "M":
        m = Mapping(_int(parts[1]), _int(parts[2]), _int(parts[3]), parts[4], parts[5])
        maps = rec.process(pid).maps
        if all((x.start, x.path) != (m.start, m.path) for x in maps) and len(maps) < 4096:
            maps.append(m)
    elif kind == "F":
        fk = Fork(pid, int(parts[2]), int(parts[1]), int(parts[3]), int(parts[4]))
        forks[(pid, fk.seq)] = fk
        rec.forks.append(fk)
    elif kind == "S":
        forks[(pid, int(parts[1]))].stack = [_int(a) for a in parts[2:]]
    elif kind == "T":
        forks[(pid, int(parts[1]))].threads.append((int(parts[2]), _int(parts[3]), parts[4]))
    elif kind == "H":
        fk = forks[(pid, int(parts[1]))]
        fk.held.append((int(parts[2]), _int(parts[3]), _int(parts[4])))
    elif kind == "P":
        p.parent[pid] = (int(parts[1]), int(parts[2]))
    elif kind == "C":
        did = ChildDid(parts[2], _int(parts[3]), _int(parts[4]), parts[5] == "1")
        p.did.setdefault(pid, []).append(did)
    elif kind == "X":
        p.execs.add(pid)
    elif kind == "E":
        v = [_int(a) for a in parts[3:]]
        rec.edges.append(
            Edge(pid, int(parts[1]), parts[2], (v[0], v[1]), (v[2], v[3]), v[4], v[5], v[6:])
        )
    else:
        raise ValueError(kind)


def _join_children(rec: Records, forks: dict[tuple[int, int], Fork], p: _Pending) -> None:
    for child, (ppid, seq) in p.parent.items():
        fk = forks.get((ppid, seq))
        if fk is None:
            continue
        fk.child = child
        fk.child_did = p.did.get(child, [])
        # an exec is an X record (execve and its family through the shim), or the new image's
        # own I record (execl and posix_spawn call execve inside libc, unseen)
        proc = rec.processes.get(child)
        fk.child_exec = child in p.execs or (proc is not None and proc.images > 0)


def _files(folder: Path) -> list[tuple[str, int, Path]]:
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    found = []
    for path in entries:
        m = _NAME.fullmatch(path.name)
        if m and not path.is_symlink():
            found.append((m.group(1), int(m.group(2)), path))
    return found[:MAX_FILES]


def _read(path: Path, rec: Records) -> str | None:
    """A record file's text, at most FILE_CAP bytes of it (to its last whole line)."""
    try:
        fd = open_regular(path, what="hazard record")
    except HarnessError as exc:
        rec.unreadable.append(exc.message)
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(FILE_CAP + 1)
    if len(data) > FILE_CAP:
        data = data[: data.rfind(b"\n", 0, FILE_CAP) + 1]
        rec.unreadable.append(f"{path.name}: read to its first {FILE_CAP >> 20} MiB")
    return data.decode("utf-8", "replace")


def _python_line(rec: Records, line: str) -> None:
    obj = json.loads(line)
    event = obj.get("event") if isinstance(obj, dict) else None
    if event == "fork":
        rec.py_forks.append(obj)
    elif event == "child":
        rec.py_children.append(obj)
    elif event == "edge":
        rec.py_edges.append(obj)
    else:
        raise ValueError(event)


def read_records(folder: Path) -> Records:
    """Every record of the run's hazards folder."""
    rec = Records()
    forks: dict[tuple[int, int], Fork] = {}
    pending = _Pending()
    for kind, _pid, path in _files(folder):
        text = _read(path, rec)
        for line in (text or "").splitlines():
            try:
                if kind == "native":
                    _native_line(rec, line, forks, pending)
                else:
                    _python_line(rec, line)
            except (ValueError, IndexError, KeyError, AttributeError):
                rec.bad_lines += 1
    _join_children(rec, forks, pending)
    return rec
