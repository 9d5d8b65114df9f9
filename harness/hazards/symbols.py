"""Raw addresses of the shim's records named: a code address → function, file and line (by
binutils' addr2line over the file it was mapped from, one call per file, with a timeout); a
mutex's address → the variable it is (by the ELF symbol table, pyelftools), else "a mutex on
the heap". The file mapping comes from the process's own M records: the process is gone
by the time this runs. Everything is bounded and never raises: an address that cannot be
named keeps its module and offset."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.hazards.model import Site
from harness.hazards.records import Mapping
from harness.process.tools import find_tool, run_tool

ADDR2LINE_TIMEOUT_S = 10.0
_ADDRESS = re.compile(r"0x[0-9a-f]+")
_WHERE = re.compile(r"(.*?):(\d+)(?::\d+)?(?: \(discriminator \d+\))?$")
MAX_ADDRESSES = 4096  # per file
MAX_ELF_BYTES = 256 << 20  # a file this large is not opened for its symbols


@dataclass
class _Elf:
    loads: list[tuple[int, int, int]] = field(default_factory=list)  # offset, vaddr, memsz
    objects: list[tuple[int, int, str]] | None = None  # vaddr, size, name; read on demand


def _read_elf(path: str, symbols: bool = False) -> _Elf:
    """The file's loadable segments; with `symbols`, its data objects too (a large symbol
    table, libpython's, takes a second: read only to name a mutex)."""
    out = _Elf()
    try:
        if os.path.getsize(path) > MAX_ELF_BYTES:
            return out
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD":
                    # memsz: a mutex in .bss lies past the bytes the file holds
                    out.loads.append((seg["p_offset"], seg["p_vaddr"], seg["p_memsz"]))
            if not symbols:
                return out
            out.objects = []
            for name in (".symtab", ".dynsym"):
                table = elf.get_section_by_name(name)
                if table is None or not hasattr(table, "iter_symbols"):
                    continue
                for sym in table.iter_symbols():
                    if sym["st_info"]["type"] == "STT_OBJECT" and sym["st_size"] > 0:
                        out.objects.append((sym["st_value"], sym["st_size"], sym.name))
                if out.objects:
                    break
    except Exception:  # a file replaced since the run, or one pyelftools cannot read
        return _Elf(objects=[] if symbols else None)
    return out


class Namer:
    """Names the addresses of one run's records (a cache per file)."""

    def __init__(self) -> None:
        self._elfs: dict[str, _Elf] = {}
        self._lines: dict[tuple[str, int], list[Site]] = {}
        # llvm-symbolizer reads clang's inlined functions (binutils 2.40 names the outer
        # function with the inner line); binutils addr2line where it is not installed
        self._llvm = find_tool("llvm-symbolizer")
        self._addr2line = None if self._llvm else find_tool("addr2line")

    def _elf(self, path: str, symbols: bool = False) -> _Elf:
        known = self._elfs.get(path)
        if known is None or (symbols and known.objects is None):
            known = self._elfs[path] = _read_elf(path, symbols)
        return known

    @staticmethod
    def mapping(maps: list[Mapping], addr: int) -> Mapping | None:
        return next((m for m in maps if m.start <= addr < m.end), None)

    def _vaddr(self, m: Mapping, addr: int) -> int | None:
        off = addr - m.start + m.offset
        for p_off, p_vaddr, size in self._elf(m.path).loads:
            if p_off <= off < p_off + max(size, 1):
                return off - p_off + p_vaddr
        return None

    def prepare(self, maps: list[Mapping], addrs: Iterable[int]) -> None:
        """Name every code address of one process in one eu-addr2line call per file."""
        per_file: dict[str, list[int]] = {}
        for addr in addrs:
            m = self.mapping(maps, addr)
            if m is None or "x" not in m.perms:
                continue
            vaddr = self._vaddr(m, addr - 1)  # a return address: the call is just before it
            if vaddr is not None and (m.path, vaddr) not in self._lines:
                per_file.setdefault(m.path, []).append(vaddr)
        for path, vaddrs in per_file.items():
            self._name_lines(path, sorted(set(vaddrs))[:MAX_ADDRESSES])

    def _name_lines(self, path: str, vaddrs: list[int]) -> None:
        """llvm-symbolizer or binutils addr2line (-a: each address heads its group; -i: the
        inlined functions too, innermost first, so a fork inside an inlined helper is named
        by the helper); both read clang's DWARF 5 line tables, which eu-addr2line 0.188
        does not."""
        base = Path(path).name
        addrs = [hex(v) for v in vaddrs]
        if self._llvm is not None:
            argv = [self._llvm, f"--obj={path}", "-a", "-f", "-i", "-C", *addrs]
        elif self._addr2line is not None:
            argv = [self._addr2line, "-a", "-f", "-i", "-C", "-e", path, *addrs]
        else:
            return
        if not vaddrs:
            return
        res = run_tool(argv, timeout=ADDR2LINE_TIMEOUT_S)
        if res.returncode != 0:
            return
        groups: dict[int, list[str]] = {}
        current: list[str] | None = None
        for row in res.stdout.splitlines():
            if not row:
                continue
            if _ADDRESS.fullmatch(row):
                current = groups.setdefault(int(row, 16), [])
            elif current is not None:
                current.append(row)
        for vaddr in vaddrs:
            rows = groups.get(vaddr, [])
            chain = []  # the inlined chain, innermost first: (function, file:line) pairs
            for function, where in zip(rows[0::2], rows[1::2], strict=False):
                m = _WHERE.match(where)
                file, lineno = (m.group(1), int(m.group(2))) if m else ("", 0)
                known = file not in ("", "??") and lineno > 0
                chain.append(
                    Site(
                        function if function not in ("??", "") else f"{base}+{vaddr:#x}",
                        Path(file).name if known else "",
                        lineno if known else 0,
                        base,
                    )
                )
            if chain:
                self._lines[(path, vaddr)] = chain

    def frames(self, maps: list[Mapping], addr: int) -> list[Site]:
        """The frames of a return address, the functions inlined at it first (call
        `prepare` with it first)."""
        m = self.mapping(maps, addr)
        if m is None:
            return [Site(f"{addr:#x}")]
        vaddr = self._vaddr(m, addr - 1)
        base = Path(m.path).name
        if vaddr is None:
            return [Site(f"{base}+{addr - m.start + m.offset:#x}", module=base)]
        return self._lines.get((m.path, vaddr)) or [Site(f"{base}+{vaddr:#x}", module=base)]

    def site(self, maps: list[Mapping], addr: int) -> Site:
        """The innermost frame of a return address."""
        return self.frames(maps, addr)[0]

    def variable(self, maps: list[Mapping], addr: int) -> str:
        """The name of the variable a mutex is (`lock_a`, `table+0x40`), else where it is."""
        m = self.mapping(maps, addr)
        if m is None:
            return f"a mutex at {addr:#x} (heap or stack)"
        vaddr = self._vaddr(m, addr)
        if vaddr is not None:
            for start, size, name in self._elf(m.path, symbols=True).objects or []:
                if start <= vaddr < start + size:
                    plus = f"+{vaddr - start:#x}" if vaddr != start else ""
                    return f"{name}{plus}"
        return f"a mutex in {Path(m.path).name} at {addr:#x}"
