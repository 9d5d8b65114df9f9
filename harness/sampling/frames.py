"""How a stack frame is attributed: which mapped file (module) an address belongs to,
whether a frame is the traced program's own code rather than a runtime library, and
whether it was inlined into its caller."""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.files import read_text
from harness.sampling.model import Frame

# Python's own library tree (stdlib, and site-packages under it) and distro package dirs.
_PYTHON_LIB = re.compile(r"/lib(64)?/python\d+(\.\d+)?[a-z]?/|/(site|dist)-packages/")


def is_inline(frame: Frame) -> bool:
    return bool(getattr(frame, "inline", False))


@dataclass
class FrameContext:
    """What a parser needs to fill in modules, thread names and `own` flags."""

    exe: str = ""
    python_exe: bool = False  # main executable is the interpreter: a runtime, not own
    own_roots: tuple[str, ...] = ()
    names: dict[int, str] = field(default_factory=dict)  # tid -> comm
    maps: MemoryMap | None = None
    # realpath() per path: a 64-thread stack names the same few files hundreds of times,
    # and each realpath is an lstat per path component
    _real: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def realpath(self, path: str) -> str:
        real = self._real.get(path)
        if real is None:
            real = self._real[path] = os.path.realpath(path)
        return real

    def under_own_root(self, path: str | None) -> bool:
        if not path or not self.own_roots or not os.path.isabs(path):
            return False
        real = self.realpath(path)
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.own_roots)

    def native_own(self, module: str | None, file: str | None) -> bool:
        if self.under_own_root(file) or self.under_own_root(module):
            return True
        if module is None or self.python_exe or not self.exe:
            return False
        if os.path.isabs(module) and os.path.isabs(self.exe):
            return self.realpath(module) == self.realpath(self.exe)
        return os.path.basename(module) == os.path.basename(self.exe)

    def python_own(self, file: str | None) -> bool:
        if self.under_own_root(file):
            return True
        if not file or file.startswith("<"):  # "<frozen importlib._bootstrap>", "<string>"
            return False
        return _PYTHON_LIB.search(file) is None


class MemoryMap:
    """Address → mapped file, from /proc/PID/maps, to name a frame's module.

    gdb prints `from LIB` only for libraries without debug info; with debug info it
    prints `at FILE:LINE` and the module is lost. The frame address (printed for every
    frame with `set print frame-info location-and-address`) recovers it.
    """

    def __init__(self, ranges: Iterable[tuple[int, int, str]]) -> None:
        self._ranges = sorted(ranges)
        self._starts = [r[0] for r in self._ranges]

    @classmethod
    def read(cls, pid: int, tid: int) -> MemoryMap:
        text = read_text(f"/proc/{pid}/task/{tid}/maps") or ""
        return cls(r for r in map(_parse_maps_line, text.splitlines()) if r is not None)

    def maps_file(self, fragment: str) -> bool:
        """Whether any mapped file's basename contains `fragment` (e.g. "libpython")."""
        return any(fragment in os.path.basename(r[2]) for r in self._ranges)

    def lookup(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._ranges[i][1]:
            return self._ranges[i][2]
        return None


def _parse_maps_line(line: str) -> tuple[int, int, str] | None:
    parts = line.split(maxsplit=5)
    if len(parts) < 6 or not parts[5].startswith("/"):
        return None  # anonymous, [heap], [stack], [vdso]
    lo, hi = parts[0].split("-")
    return int(lo, 16), int(hi, 16), parts[5].removesuffix(" (deleted)")
