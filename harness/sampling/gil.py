"""CPython's GIL as a lock with a holder (docs/quiescence.md, "Runtime locks").

A thread that needs the GIL while another holds it (take_gil, from PyEval_RestoreThread,
PyGILState_Ensure, a `with gil:` block) does not sleep until it is free: it waits on a
condition variable with the switch interval as its timeout (5 ms), asks the holder to drop
it, and waits again, for as long as the holder keeps it. To /proc that is a timed futex wait
that keeps ending by itself; it is a lock wait all the same, whose waker is the GIL's
holder. Two facts make it one, neither needing debug symbols:

- the futex word lies inside the runtime's state, `_PyRuntime`: an exported data symbol
  (with its size) of libpython or of the interpreter's executable, placed by the ELF's
  dynamic symbols and the file's base in /proc/PID/maps. The main interpreter's GIL lives
  there in CPython 3.8 to 3.13 (`_PyRuntime.ceval.gil`, since 3.12 the main interpreter's
  `_gil`, itself inside `_PyRuntime`);
- the holder, read from the runtime's own state by py-spy (`dump --json`: each thread's
  `owns_gil`), without stopping the process (`--nonblocking`).

Both reads are bounded and never raise: what cannot be read is None, with the reason.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import BinaryIO

from harness.process.tools import find_tool, run_tool
from harness.sampling import runtimes
from harness.vocab import StackToolName

STATE_SYMBOL = "_PyRuntime"
PY_SPY_TIMEOUT_S = 5.0
_MAX_ELF_BYTES = 256 << 20

# (path, inode) → the symbol's (value, size) and the file's lowest loaded address (-1: a
# fixed-address executable, loaded where its addresses say), or None
_symbols: dict[tuple[str, int], tuple[int, int, int] | None] = {}


@dataclass(frozen=True)
class GilHolder:
    """Who holds the GIL of one process (py-spy's reading): `tid` None when nobody does."""

    tid: int | None
    name: str = ""


def runtime_state(pid: int) -> tuple[int, int] | None:
    """[start, end) of `_PyRuntime` in the process's memory; None when no file it maps
    exports it (not CPython, a static build without exports) or the maps are unreadable."""
    seen: set[str] = set()
    for line in runtimes.read_maps(pid).splitlines():
        parts = line.split(maxsplit=5)
        # a file's mapping at offset 0: its start is the file's base (less its lowest
        # address), its span opens the very file mapped
        if len(parts) < 6 or not parts[5].startswith("/") or int(parts[2], 16) != 0:
            continue
        path = parts[5].removesuffix(" (deleted)")
        name = os.path.basename(path)
        if path in seen or "python" not in name or not parts[4].isdigit() or parts[4] == "0":
            continue
        seen.add(path)
        found = _symbol(pid, runtimes.Mapped(path, int(parts[4]), parts[0]))
        if found is not None:
            value, size, lowest = found
            base = 0 if lowest < 0 else int(parts[0].split("-")[0], 16) - lowest
            return base + value, base + value + max(size, 1)
    return None


def _symbol(pid: int, m: runtimes.Mapped) -> tuple[int, int, int] | None:
    key = (m.path, m.inode)
    if key not in _symbols:
        _symbols[key] = _read_symbol(pid, m)
    return _symbols[key]


def _read_symbol(pid: int, m: runtimes.Mapped) -> tuple[int, int, int] | None:
    with runtimes.open_mapped(pid, m) as fd:
        if fd is None:
            return None
        try:
            if os.fstat(fd).st_size > _MAX_ELF_BYTES:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                return _elf_symbol(fh)
        except Exception:  # pyelftools over a file nobody vetted
            return None


def _elf_symbol(fh: BinaryIO) -> tuple[int, int, int] | None:
    # imported here: pyelftools costs 0.1 s to import, paid only by a run that needs it
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(fh)
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None or not hasattr(dynsym, "get_symbol_by_name"):
        return None
    found = dynsym.get_symbol_by_name(STATE_SYMBOL)
    if not found:
        return None
    sym = found[0]
    if sym["st_shndx"] == "SHN_UNDEF" or sym["st_info"]["type"] != "STT_OBJECT":
        return None  # imported from another file (the executable linking libpython)
    loads = [s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
    if not loads:
        return None
    # a shared object or PIE is loaded at its base plus its addresses; the lowest PT_LOAD
    # starts at the mapping of file offset 0 (page-aligned down)
    lowest = min(loads) & ~0xFFF
    if elf["e_type"] == "ET_EXEC":
        lowest = -1  # a fixed-address executable (Debian's python3): its addresses are it
    return int(sym["st_value"]), int(sym["st_size"]), lowest


def gil_holder(pid: int) -> GilHolder | str:
    """The thread holding the process's GIL, by py-spy without stopping it; a string saying
    why not when it cannot be read."""
    tool = find_tool(StackToolName.PY_SPY)
    if tool is None:
        return "py-spy is not installed"
    res = run_tool([tool, "dump", "--json", "--nonblocking", "--pid", str(pid)], PY_SPY_TIMEOUT_S)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or [res.error or "no output"])[0]
        return f"py-spy: {'timed out' if res.timed_out else last[:200]}"
    return parse_holder(res.stdout)


def parse_holder(text: str) -> GilHolder | str:
    """The GIL's holder from `py-spy dump --json` (its threads' `owns_gil`)."""
    try:
        threads = json.loads(text)
    except ValueError:
        return "py-spy: output not JSON"
    if not isinstance(threads, list):
        return "py-spy: output not a list of threads"
    owners = [t for t in threads if isinstance(t, dict) and t.get("owns_gil") is True]
    if len(owners) > 1:
        return "py-spy: more than one thread holds the GIL (read while it changed hands)"
    if not owners:
        return GilHolder(None)
    tid = owners[0].get("os_thread_id")
    if not isinstance(tid, int) or tid <= 0:
        return "py-spy: the holder's thread id is not known"
    return GilHolder(tid, str(owners[0].get("thread_name") or ""))
