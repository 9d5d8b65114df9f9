"""A rank as the program gave it to torch: the `rank` and `world_size` of its
`init_process_group` call, for ranks no launcher told in the environment or on the command
line (sampling/ranks.py). `torch.multiprocessing.spawn` passes the rank as an argument
(`fn(i, *args)`), a hand-written launcher may pass it any way it likes; what every program
does is hand it to `init_process_group`. Read from outside, two ways:

- a process still inside the call (a rank at the rendezvous, waiting for one that never
  came) has its `init_process_group` frame on the stack: its `rank` and `world_size`
  arguments are among the frame's locals;
- a process that returned from it (a rank in a collective) usually still runs the function
  that made the call (`def run(rank, world): init_process_group(..., rank=rank); ...;
  all_reduce(t)`): the call is read from that function's source, and its `rank=`/
  `world_size=` expressions are evaluated over the frame's locals as they are now.

The locals come from one `py-spy dump --locals` of each such process: only processes with no
rank yet and a frame in torch.distributed, at most MAX_PROCESSES, each bounded in time and
resumed if the killed tool left it stopped (sampling/stacks.py's settle_tracer). An expression
that is not plain integer arithmetic over names and constants (`args.rank`, a call) reads
as no rank: the launcher's environment or arguments, when there are any, were read first.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.process.tools import run_tool
from harness.sampling.model import ProcessSample, SampleSet
from harness.sampling.procfs import live_tid
from harness.sampling.pysource import function_at, parse_tree
from harness.sampling.ranks import ProcessRank
from harness.sampling.stacks import settle_tracer, stopped_tids
from harness.sampling.tools import Invocation, by_name
from harness.vocab import StackToolName

CALL = "init_process_group"
# a frame here makes a process a candidate: a rank in a collective or at its rendezvous, or
# in one DDP makes through the bindings (its forward's buffer broadcast)
DISTRIBUTED_FRAME = re.compile(r"torch/distributed/[^/]+\.py$|torch/nn/parallel/distributed\.py$")
_C10D = re.compile(r"torch/distributed/distributed_c10d\.py$")
MAX_PROCESSES = 8  # processes whose locals are read, at most
LOCALS_TIMEOUT_S = 3.0  # one dump, at most (0.1-0.2 s for a rank)
# init_process_group(backend, init_method, timeout, world_size, rank, store, …): where a
# positional argument lands
_POSITION = {"world_size": 3, "rank": 4}
_OPS: dict[type[ast.operator], Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else None,
    ast.Mod: lambda a, b: a % b if b else None,
}


@dataclass(frozen=True)
class FrameLocals:
    """One frame of a `py-spy dump --locals`: where it is and its locals as py-spy shows
    them (`repr`-like text: `0`, `"spawn"`, `<Tensor at 0x…>`)."""

    function: str
    file: str
    line: int
    values: Mapping[str, str]


def parse_locals(text: str) -> list[list[FrameLocals]]:
    """`py-spy dump --json --locals`: each thread's frames, innermost first."""
    data = json.loads(text)
    threads: list[list[FrameLocals]] = []
    for th in data if isinstance(data, list) else []:
        frames = []
        for f in th.get("frames") or []:
            values = {
                str(v["name"]): str(v.get("repr", ""))
                for v in f.get("locals") or []
                if isinstance(v, dict) and "name" in v
            }
            name, file = str(f.get("name", "")), str(f.get("filename") or "")
            frames.append(FrameLocals(name, file, int(f.get("line") or 0), values))
        threads.append(frames)
    return threads


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def evaluate(node: ast.expr, values: Mapping[str, str]) -> int | None:
    """An integer expression over a frame's locals (names, constants, + - * // %, unary -);
    None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return _int(values.get(node.id))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = evaluate(node.operand, values)
        return -v if v is not None else None
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = evaluate(node.left, values), evaluate(node.right, values)
        return _OPS[type(node.op)](a, b) if a is not None and b is not None else None
    return None


def _calls(fn: ast.AST) -> list[ast.Call]:
    """The init_process_group calls in a function (`dist.init_process_group(…)`, a bare
    imported name too), in source order; not those of functions defined inside it."""
    found: list[ast.Call] = []
    todo: list[ast.AST] = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == CALL:
                found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda c: c.lineno)


def _argument(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    pos = _POSITION[name]
    return call.args[pos] if pos < len(call.args) else None


def _size(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None  # -1: "from the environment"


def rank_in_frames(pid: int, frames: Sequence[FrameLocals]) -> ProcessRank | None:
    """The rank the frames of one thread (innermost first) show it gave init_process_group:
    the call's own frame, else the innermost frame of a function that makes the call."""
    for f in frames:
        if f.function == CALL and _C10D.search(f.file):
            rank = _int(f.values.get("rank"))
            if rank is not None and rank >= 0:
                size = _size(_int(f.values.get("world_size")))
                return ProcessRank(pid, rank, size, None, "torch", f"{CALL}(rank={rank})")
            continue
        if DISTRIBUTED_FRAME.search(f.file) or not f.file.endswith(".py"):
            continue
        tree = parse_tree(f.file)
        fn = function_at(tree, f.line) if tree is not None else None
        for call in _calls(fn) if fn is not None else []:
            expr = _argument(call, "rank")
            rank = evaluate(expr, f.values) if expr is not None else None
            if expr is None or rank is None or rank < 0:
                continue
            size_expr = _argument(call, "world_size")
            size = _size(evaluate(size_expr, f.values)) if size_expr is not None else None
            where = f"{f.function} ({f.file.rsplit('/', 1)[-1]}:{call.lineno})"
            return ProcessRank(
                pid, rank, size, None, "torch", f"{CALL}(rank={ast.unparse(expr)}) in {where}"
            )
    return None


def candidates(processes: Sequence[ProcessSample], result: SampleSet) -> list[ProcessSample]:
    """The processes worth a locals dump: no rank yet, a Python frame in torch.distributed."""
    known = {r.pid for r in result.ranks}
    inside = {
        st.pid
        for st in result.stacks
        if st.python and any(f.file and DISTRIBUTED_FRAME.search(f.file) for f in st.frames)
    }
    return [p for p in processes if p.pid in inside and p.pid not in known][:MAX_PROCESSES]


def read_call_ranks(
    processes: Sequence[ProcessSample], result: SampleSet, py_spy: str | None, deadline: float
) -> list[ProcessRank]:
    """The ranks of the candidates, from one `py-spy dump --locals` each, started only
    before `deadline` (a time.monotonic()); notes on a dump that failed go to result."""
    if py_spy is None:
        return []
    tool = by_name(StackToolName.PY_SPY)
    found: list[ProcessRank] = []
    for proc in candidates(processes, result):
        budget = min(LOCALS_TIMEOUT_S, deadline - time.monotonic())
        if budget < 0.5:
            result.notes.append(f"py-spy --locals: time budget spent, pid {proc.pid} skipped")
            break
        attach = live_tid(proc.pid, proc.threads)  # the main thread may have exited
        if attach is None:
            continue
        before = stopped_tids(proc.pid)
        run = run_tool(tool.argv(Invocation(py_spy, attach, py_locals=True)), budget)
        settle_tracer(proc.pid, before, run.timed_out, result.notes)
        try:
            threads = parse_locals(run.stdout) if run.returncode == 0 else []
        except (ValueError, KeyError, TypeError, AttributeError):
            threads = []
        if run.returncode != 0:
            why = "timed out" if run.timed_out else (run.error or run.output.strip()[:120])
            result.notes.append(f"py-spy --locals on pid {proc.pid}: {why}")
        rank = next((r for t in threads if (r := rank_in_frames(proc.pid, t))), None)
        if rank is not None:
            found.append(rank)
    return found
