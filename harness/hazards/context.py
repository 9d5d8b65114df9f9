"""What the hazard rules share while they read one run's records: the addresses named
(symbols.Namer), each mapped file's runtime (sampling.runtimes: libgomp, libomp, glibc, the
shim itself …), the program's own frames told from the runtimes', and the hazards found,
folded (the same kind at the same place is one hazard, counted)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.hazards.model import Hazard, Site
from harness.hazards.records import Mapping, Records
from harness.hazards.symbols import Namer
from harness.sampling.pysource import source_line
from harness.sampling.runtimes import identify

SHIM_MODULE = "libpuffer-hazards"
FRAMES_SHOWN = 8
PYTHON = "python"


class Context:
    def __init__(self, rec: Records) -> None:
        self.rec = rec
        self.namer = Namer()
        self._runtimes: dict[str, str] = {}  # mapped file -> its runtime ("" for none)
        self.found: dict[tuple[str, str], Hazard] = {}

    def maps(self, pid: int) -> list[Mapping]:
        proc = self.rec.processes.get(pid)
        return proc.maps if proc else []

    def runtime_of(self, path: str) -> str:
        if path not in self._runtimes:
            ident = identify(path) if path.startswith("/") else None
            self._runtimes[path] = ident.runtime if ident else ""
        return self._runtimes[path]

    def runtime_at(self, pid: int, addr: int) -> str:
        """The runtime a code address lies in ("" for the program's own code or unknown)."""
        m = Namer.mapping(self.maps(pid), addr) if addr else None
        return self.runtime_of(m.path) if m else ""

    def sites(self, pid: int, addrs: Sequence[int]) -> list[Site]:
        maps = self.maps(pid)
        self.namer.prepare(maps, addrs)
        for m in maps:
            if "x" in m.perms:
                self.runtime_of(m.path)
        return [self.namer.site(maps, a) for a in addrs]

    def site(self, pid: int, addr: int) -> Site:
        return self.sites(pid, [addr])[0]

    def stack(self, pid: int, addrs: Sequence[int]) -> list[Site]:
        """A recorded stack, inlined functions as frames of their own, less the shim's own
        frames (its wrapper, its recorder)."""
        self.sites(pid, addrs)
        maps = self.maps(pid)
        sites = [s for a in addrs for s in self.namer.frames(maps, a)]
        while sites and SHIM_MODULE in sites[0].module:
            sites.pop(0)
        return sites

    def own(self, site: Site) -> bool:
        """The program's own frame: not the shim's, not a known runtime's (libc, libgomp …)."""
        if not site.module or site.module == PYTHON or SHIM_MODULE in site.module:
            return False
        return not any(Path(p).name == site.module and rt for p, rt in self._runtimes.items())

    def first_own(self, stack: Sequence[Site]) -> Site | None:
        return next((s for s in stack if self.own(s)), None)

    def variable(self, pid: int, lock: int) -> str:
        return self.namer.variable(self.maps(pid), lock)

    def is_python(self, pid: int) -> bool:
        """A Python interpreter: its executable or a mapped libpython."""
        proc = self.rec.processes.get(pid)
        if proc is not None and Path(proc.exe).name.startswith(PYTHON):
            return True
        return any(self.runtime_of(m.path) == "libpython" for m in self.maps(pid) if "x" in m.perms)

    def add(self, hz: Hazard) -> None:
        key = (hz.kind.value, hz.where)
        old = self.found.get(key)
        self.found[key] = hz if old is None else dataclasses.replace(old, count=old.count + 1)


def py_sites(frames: Any) -> list[Site]:
    """The hook's frames ([file, line, function], innermost first) as Sites."""
    out = []
    for fr in frames if isinstance(frames, list) else []:
        if isinstance(fr, list) and len(fr) == 3:
            try:
                line = int(fr[1] or 0)
            except (TypeError, ValueError):
                line = 0
            out.append(Site(str(fr[2]), Path(str(fr[0])).name, line, PYTHON))
    return out


def py_site(frame: Any) -> Site | None:
    found = py_sites([frame])
    return found[0] if found else None


_ASSIGNED = re.compile(r"\s*(?:self\.)?([A-Za-z_][\w.]*)\s*(?::[^=]*)?=[^=].*\bR?Lock\(")


def py_lock_name(made_at: object, serial: int) -> str:
    """`ledger (bank.py:9)` when the line that made the lock assigns it to a name, else
    `the Lock made at bank.py:9` (the hook records where each lock was made)."""
    path, _, line = str(made_at or "").rpartition(":")
    if not path or not line.isdigit():
        return f"lock #{serial}" if serial else "a Lock"
    where = f"{Path(path).name}:{line}"
    m = _ASSIGNED.match(source_line(path, int(line)))
    return f"{m.group(1)} ({where})" if m else f"the Lock made at {where}"
