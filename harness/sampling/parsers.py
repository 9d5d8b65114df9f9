"""Parsers for the stack tools' output: gdb's `thread apply all bt`, eu-stack's (`-q -a -m`
with the names from `eu-addr2line --pretty-print`, or `-a -m -s -i` alone) and
`py-spy dump --json`, each into one ThreadStack per thread, frames innermost first.

Inlined functions are frames of their own, as `InlinedFrame`s: eu-addr2line says which
(`(inlined by)`); gdb and `eu-stack -i` print them at their caller's address, which
`_mark_inlines` reads (see there for how they are told apart from recursion)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.sampling.frames import FrameContext
from harness.sampling.model import Frame, InlinedFrame, ThreadStack
from harness.vocab import StackToolName

_GDB_THREAD = re.compile(r"^Thread\s+\d+\s+\((.*)\):\s*$")
_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+)\s+in\s+)?(.*)$")
_GDB_AT = re.compile(r"\s+at\s+(\S+):(\d+)$")
_GDB_FROM = re.compile(r"\s+from\s+(\S+)$")
_EU_THREAD = re.compile(r"^TID\s+(\d+):\s*$")
_EU_FRAME = re.compile(r"^#\d+\s+0x([0-9a-fA-F]+)(.*)$")
# `-s`: the next line, indented 4: FILE[:LINE[:COLUMN]] (LINE only when known)
_EU_SOURCE = re.compile(r"^ {4}(\S.*?)(?::(\d+)(?::\d+)?)?\s*$")
# eu-addr2line -a -f -i --pretty-print: `0xADDR: FUNC at FILE:LINE:COL`, then one
# ` (inlined by) FUNC at FILE:LINE:COL` per caller it was inlined into
_A2L_ADDR = re.compile(r"^0x([0-9a-fA-F]+): (.*)$")
_A2L_INLINED = re.compile(r"^ \(inlined by\) (.*)$")
_A2L_WHERE = re.compile(r"^(.*?):(\d+)(?::\d+)?$")

# one source location of a code address: (function, file, line)
Location = tuple[str, str | None, int | None]


@dataclasses.dataclass
class _Row:
    """A parsed frame and the code address it was printed with (None: gdb printed none)."""

    frame: Frame
    pc: tuple[int, bool | None] | None  # (address, is-activation) for eu-stack -a


def parse_gdb(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `thread apply all bt` output into one ThreadStack per `Thread N (...)`."""
    threads: list[tuple[int, str, list[_Row]]] = []
    for line in text.splitlines():
        header = _GDB_THREAD.match(line)
        if header:
            tid, name = _gdb_thread_ids(header.group(1), pid)
            threads.append((tid, name or ctx.names.get(tid, ""), []))
            continue
        frame = _GDB_FRAME.match(line)
        if frame and threads:
            addr = frame.group(2)
            pc = (int(addr, 16), None) if addr else None
            threads[-1][2].append(_Row(_gdb_frame(addr, frame.group(3), ctx), pc))
    return [
        ThreadStack(pid, tid, name, _mark_inlines(rows), StackToolName.GDB)
        for tid, name, rows in threads
    ]


def _gdb_thread_ids(inside: str, pid: int) -> tuple[int, str]:
    # `Thread 0x7f.. (LWP 4610) "xfer_b_to_a"`, `LWP 4610`, or `process 4610` (no libpthread)
    lwp = re.search(r"(?:LWP|process)\s+(\d+)", inside)
    name = re.search(r'"([^"]*)"\s*$', inside)
    return (int(lwp.group(1)) if lwp else pid), (name.group(1) if name else "")


def _gdb_frame(addr: str | None, rest: str, ctx: FrameContext) -> Frame:
    file: str | None = None
    line: int | None = None
    module: str | None = None
    if at := _GDB_AT.search(rest):
        file, line, rest = at.group(1), int(at.group(2)), rest[: at.start()]
    elif src := _GDB_FROM.search(rest):
        module, rest = src.group(1), rest[: src.start()]
    if module is None and addr and ctx.maps is not None:
        module = ctx.maps.lookup(int(addr, 16))
    function = _strip_args(rest.strip()) or "??"
    return Frame(function, module, file, line, ctx.native_own(module, file))


def _strip_args(s: str) -> str:
    """`transfer_a_to_b (arg=0x0)` → `transfer_a_to_b`; keeps `<signal handler called>`."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(s[i], 0)
        if depth == 0:
            return s[:i].rstrip()
    return s


def parse_eu_stack(
    text: str, pid: int, ctx: FrameContext, names: Mapping[int, Sequence[Location]] | None = None
) -> list[ThreadStack]:
    """Parse eu-stack's output (stdout), per thread `TID N:` then frames:

        #4  0x0000562b08a3f24b - 1 wait_for_work - /tmp/t64/threads64
            /src/threads64.c:20:9
        #0  0x00007fdf4e88b823     - /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0

    `-a` prints ` - 1` for a return address (a caller's frame) and four blanks for the
    frame's own pc; `-m` the module after ` - `; no symbol (or `-q`), no name (here
    `??`); `-s` the source on the next line; `-i` inlined functions as frames at the
    caller's address. Also reads the output without `-a`, `-s` or `-i`.

    `names` (`parse_addr2line` of the `eu_stack_addresses`) names the frames of `-q`
    output: each frame becomes its chain of locations, the inlined ones first.
    """
    threads: list[tuple[int, list[_Row]]] = []
    for line in text.splitlines():
        if m := _EU_THREAD.match(line):
            threads.append((int(m.group(1)), []))
        elif (m := _EU_FRAME.match(line)) and threads:
            threads[-1][1].append(_eu_row(int(m.group(1), 16), m.group(2), ctx))
        elif (m := _EU_SOURCE.match(line)) and threads and threads[-1][1]:
            frame = threads[-1][1][-1].frame
            frame.file = m.group(1)
            frame.line = int(m.group(2)) if m.group(2) else None
            frame.own = ctx.native_own(frame.module, frame.file)
    # a thread eu-stack could not unwind (a zombie leader, a refused attach) says nothing
    return [
        ThreadStack(
            pid, tid, ctx.names.get(tid, ""), _eu_frames(rows, names, ctx), StackToolName.EU_STACK
        )
        for tid, rows in threads
        if rows
    ]


def eu_stack_addresses(text: str) -> dict[str, list[int]]:
    """The distinct addresses to name the frames of eu-stack output by (for eu-addr2line),
    per module ("" where eu-stack printed none), each list sorted."""
    found: dict[str, set[int]] = {}
    for line in text.splitlines():
        if m := _EU_FRAME.match(line):
            row = _eu_row(int(m.group(1), 16), m.group(2), FrameContext())
            found.setdefault(row.frame.module or "", set()).add(_lookup_address(row))
    return {module: sorted(addresses) for module, addresses in found.items()}


def _lookup_address(row: _Row) -> int:
    """The address to name a frame by: a return address (`-a`'s ` - 1`) points past the
    call, so its call instruction is one byte back (what eu-stack itself looks up)."""
    assert row.pc is not None
    pc, activation = row.pc
    return pc if activation or activation is None else pc - 1


def _eu_frames(
    rows: Sequence[_Row], names: Mapping[int, Sequence[Location]] | None, ctx: FrameContext
) -> list[Frame]:
    if names is None:
        return _mark_inlines(rows)
    frames: list[Frame] = []
    for row in rows:
        chain = names.get(_lookup_address(row))
        if not chain:
            frames.append(row.frame)
            continue
        module = row.frame.module
        for i, (function, file, line) in enumerate(chain):
            own = ctx.native_own(module, file)
            cls = InlinedFrame if i < len(chain) - 1 else Frame
            frames.append(cls(function, module, file, line, own))
    return frames


def parse_addr2line(text: str) -> dict[int, list[Location]]:
    """Parse `eu-addr2line -a -f -i -C --pretty-print ADDR...`: address → its locations,
    innermost first, each but the last inlined into the next:

        0x00005635a2eb724a: wait_for_work at /src/threads64.c:20:9
         (inlined by) pool_worker at /src/threads64.c:25:5
        0x00007fda7b9f8306: thread_main at ??:0
    """
    names: dict[int, list[Location]] = {}
    chain: list[Location] | None = None
    for line in text.splitlines():
        if m := _A2L_ADDR.match(line):
            chain = names[int(m.group(1), 16)] = [_a2l_location(m.group(2))]
        elif (m := _A2L_INLINED.match(line)) and chain is not None:
            chain.append(_a2l_location(m.group(1)))
    return names


def _a2l_location(text: str) -> Location:
    function, sep, where = text.rpartition(" at ")
    if not sep:
        function, where = text, ""
    # a versioned ELF symbol of a library without debug info: `pthread_cond_wait@@GLIBC_2.3.2`
    function = function.strip().split("@", 1)[0] or "??"
    m = _A2L_WHERE.match(where.strip())
    file, line = (m.group(1), int(m.group(2))) if m else (where.strip(), 0)
    return function, (None if file in ("", "??") else file), (line or None)


def _eu_row(addr: int, tail: str, ctx: FrameContext) -> _Row:
    activation: bool | None = None  # unknown without -a
    if tail.startswith(" - 1 ") or tail == " - 1":
        activation, tail = False, tail[4:]
    elif tail.startswith("    "):  # without -a, one blank: " SYMBOL" or " - MODULE"
        activation, tail = True, tail[4:]
    rest = tail.strip()
    if rest == "-" or rest.startswith("- "):  # no symbol, only the module
        function, module = "", rest[1:]
    else:
        function, sep, module = rest.rpartition(" - ")
        if not sep:
            function, module = rest, ""
    mod = module.strip() or (ctx.maps.lookup(addr) if ctx.maps else None)
    frame = Frame(function.strip() or "??", mod, None, None, ctx.native_own(mod, None))
    return _Row(frame, (addr, activation))


def _mark_inlines(rows: Sequence[_Row]) -> list[Frame]:
    """Frames, with the inlined ones as InlinedFrame.

    A physical frame with inlined calls is printed as a chain of frames at one address,
    the inlined callees first and the real (outer) function last. Recursion from one
    call site also repeats an address, but then the whole chain repeats, line for line
    (the same address names the same functions at the same lines), so a run of frames
    at one address is split into its shortest repeating chain; all but the last frame of
    each chain are inlined.
    """
    out: list[Frame] = []
    i = 0
    while i < len(rows):
        j = i + 1
        while rows[i].pc is not None and j < len(rows) and rows[j].pc == rows[i].pc:
            j += 1
        run = [r.frame for r in rows[i:j]]
        period = _period([(f.function, f.module, f.file, f.line) for f in run])
        out += [
            f if k % period == period - 1 else InlinedFrame(**dataclasses.asdict(f))
            for k, f in enumerate(run)
        ]
        i = j
    return out


def _period(keys: Sequence[object]) -> int:
    n = len(keys)
    return next(
        p for p in range(1, n + 1) if n % p == 0 and all(keys[x] == keys[x % p] for x in range(n))
    )


def parse_py_spy(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `py-spy dump --json` (a list of threads, innermost frame first)."""
    data = json.loads(text)
    stacks = []
    for th in data if isinstance(data, list) else []:
        tid = int(th.get("os_thread_id") or 0)
        name = th.get("thread_name") or ctx.names.get(tid, "")
        frames = [_py_frame(f, ctx) for f in th.get("frames", [])]
        stacks.append(
            ThreadStack(
                int(th.get("pid", pid)), tid, name, frames, StackToolName.PY_SPY, python=True
            )
        )
    return stacks


def _py_frame(f: dict[str, Any], ctx: FrameContext) -> Frame:
    filename = f.get("filename") or None
    line = f.get("line") or None
    if f.get("module"):  # a native frame merged in by --native: `module` is the .so
        module = str(f["module"])
        return Frame(str(f.get("name", "??")), module, None, line, ctx.native_own(module, None))
    return Frame(str(f.get("name", "??")), None, filename, line, ctx.python_own(filename))
