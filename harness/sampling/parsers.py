"""Parsers for the stack tools' output: gdb's `thread apply all bt`, `eu-stack -m -s -i`
and `py-spy dump --json`, each into one ThreadStack per thread, frames innermost first."""

from __future__ import annotations

import json
import re
from typing import Any

from harness.sampling.frames import FrameContext
from harness.sampling.model import Frame, ThreadStack

_GDB_THREAD = re.compile(r"^Thread\s+\d+\s+\((.*)\):\s*$")
_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:(0x[0-9a-fA-F]+)\s+in\s+)?(.*)$")
_GDB_AT = re.compile(r"\s+at\s+(\S+):(\d+)$")
_GDB_FROM = re.compile(r"\s+from\s+(\S+)$")
_EU_THREAD = re.compile(r"^TID\s+(\d+):\s*$")
_EU_FRAME = re.compile(r"^#\d+\s+0x([0-9a-fA-F]+)\s*(.*)$")
_EU_SOURCE = re.compile(r"^\s+(\S+?):(\d+)(?::\d+)?\s*$")


def parse_gdb(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `thread apply all bt` output into one ThreadStack per `Thread N (...)`."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        header = _GDB_THREAD.match(line)
        if header:
            tid, name = _gdb_thread_ids(header.group(1), pid)
            stacks.append(ThreadStack(pid, tid, name or ctx.names.get(tid, ""), [], "gdb"))
            continue
        frame = _GDB_FRAME.match(line)
        if frame and stacks:
            stacks[-1].frames.append(_gdb_frame(frame.group(2), frame.group(3), ctx))
    return stacks


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


def parse_eu_stack(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `eu-stack -m -s -i` output: `#N 0xADDR FUNC - MODULE` then `    FILE:LINE:COL`."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        if m := _EU_THREAD.match(line):
            tid = int(m.group(1))
            stacks.append(ThreadStack(pid, tid, ctx.names.get(tid, ""), [], "eu-stack"))
        elif (m := _EU_FRAME.match(line)) and stacks:
            stacks[-1].frames.append(_eu_frame(int(m.group(1), 16), m.group(2), ctx))
        elif (m := _EU_SOURCE.match(line)) and stacks and stacks[-1].frames:
            frame = stacks[-1].frames[-1]
            frame.file, frame.line = m.group(1), int(m.group(2))
            frame.own = ctx.native_own(frame.module, frame.file)
    return [s for s in stacks if s.frames]  # a thread eu-stack could not unwind says nothing


def _eu_frame(addr: int, rest: str, ctx: FrameContext) -> Frame:
    function, sep, module = rest.rpartition(" - ")
    if not sep:
        function, module = rest, ""
    mod = module.strip() or (ctx.maps.lookup(addr) if ctx.maps else None)
    return Frame(function.strip() or "??", mod, None, None, ctx.native_own(mod, None))


def parse_py_spy(text: str, pid: int, ctx: FrameContext) -> list[ThreadStack]:
    """Parse `py-spy dump --json` (a list of threads, innermost frame first)."""
    data = json.loads(text)
    stacks = []
    for th in data if isinstance(data, list) else []:
        tid = int(th.get("os_thread_id") or 0)
        name = th.get("thread_name") or ctx.names.get(tid, "")
        frames = [_py_frame(f, ctx) for f in th.get("frames", [])]
        stacks.append(
            ThreadStack(int(th.get("pid", pid)), tid, name, frames, "py-spy", python=True)
        )
    return stacks


def _py_frame(f: dict[str, Any], ctx: FrameContext) -> Frame:
    filename = f.get("filename") or None
    line = f.get("line") or None
    if f.get("module"):  # a native frame merged in by --native: `module` is the .so
        module = str(f["module"])
        return Frame(str(f.get("name", "??")), module, None, line, ctx.native_own(module, None))
    return Frame(str(f.get("name", "??")), None, filename, line, ctx.python_own(filename))
