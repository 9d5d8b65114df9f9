"""Housekeeping threads (docs/quiescence.md): a thread whose only activity is a periodic timed
wake-up that changes nothing does not hold back the verdict of a tree otherwise blocked on
itself. Real programs keep such threads: multiprocessing.Pool's helpers, a
`Condition.wait(timeout)` loop, a heartbeat `while True: time.sleep(0.1)`, runtimes' event
loops polling their own pipes with a timeout.

Pure, over the watch loop's recent looks. Conservative: the thread must be seen in the same
timed wait (same syscall, same six arguments) at every look over at least SPAN_S (and
LOOKS looks), waking at least MIN_WAKES times, with CPU under a small bound, while the
tree's processes and threads stayed the same and none of its processes read or wrote a
byte (/proc/PID/io rchar and wchar). A process's main thread is never excused, and every
excused thread must show only runtime or library frames in the stack dump (`stack_check`):
a timed wake-up in the program's own loop is the program working (polling for a file, a
deadline, a flag), not housekeeping.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from harness.sampling.model import Frame, Snapshot, ThreadSample, ThreadStack
from harness.sampling.waits import Wait
from harness.vocab import WaitKind

SPAN_S = 5.0  # seen idle at least this long before it is excused
LOOKS = 8  # and at this many looks at least (a look every 0.25 s: 20 over the span)
CPU_SHARE = 0.01  # at most 1% of one core over the span...
CPU_TICK = 0.01  # ...and never less than one clock tick (CPU time is counted in ticks)
MIN_WAKES = 2  # seen waking at least twice (schedstat): periodic, not one long sleep
MAX_GAP_S = 2.0  # a longer gap between looks is a pause (docs/quiescence.md): the span ends


@dataclass(frozen=True)
class Look:
    """One look of the history: the snapshot, each thread's wait by the rule, and each
    process's I/O counters (pid → (rchar, wchar); None when they were not read)."""

    snap: Snapshot
    waits: dict[tuple[int, int], Wait]
    io: dict[int, tuple[int, int]] | None = None


def _threads(snap: Snapshot) -> dict[tuple[int, int], ThreadSample]:
    return {(p.pid, t.tid): t for p in snap.processes for t in p.threads if t.state not in "ZX"}


def _same_tree(a: Look, b: Look) -> bool:
    """Same processes, same live threads, no byte read or written by any process."""
    if {p.pid for p in a.snap.processes} != {p.pid for p in b.snap.processes}:
        return False
    if _threads(a.snap).keys() != _threads(b.snap).keys():
        return False
    return a.io is not None and a.io == b.io


def _span_start(history: Sequence[Look], keys: Sequence[tuple[int, int]]) -> int:
    """Index of the earliest look from which, to the last, the tree did not change and every
    candidate sat in the same idle wait with the same syscall and arguments."""
    last = history[-1]
    now = _threads(last.snap)
    start = len(history) - 1
    for i in range(len(history) - 2, -1, -1):
        look, later = history[i], history[i + 1]
        if later.snap.t - look.snap.t > MAX_GAP_S or not _same_tree(look, last):
            break
        then = _threads(look.snap)
        same = all(
            look.waits.get(k) is not None
            and look.waits[k].idle
            and (then[k].state, then[k].syscall, then[k].syscall_args)
            == (now[k].state, now[k].syscall, now[k].syscall_args)
            for k in keys
        )
        if not same:
            break
        start = i
    return start


def _wakes(first: ThreadSample, last: ThreadSample) -> int:
    if first.runs is None or last.runs is None:
        return 0
    return last.runs - first.runs


def _why(wait: Wait, first: ThreadSample, last: ThreadSample, span: float, looks: int) -> str:
    cpu = max(0.0, last.cpu_time - first.cpu_time)
    wakes = _wakes(first, last)
    woke = f"woke {wakes} times, every ~{span / wakes:.2f}s"
    return (
        f"housekeeping: {wait.what}; the same syscall and arguments at {looks} looks over "
        f"{span:.1f}s, {woke}, {cpu:.2f}s of CPU; no process started or exited, "
        "no byte read or written by the tree"
    )


def candidate(key: tuple[int, int], wait: Wait, withdrawn: Collection[tuple[int, int]]) -> bool:
    """Whether a thread may be excused at all: an idle timed wait, not a process's main
    thread (the program's own loop runs there: a `for ...: time.sleep(0.1)` in main is the
    program working), and not a thread the stack dump showed in the program's own code."""
    pid, tid = key
    return wait.idle and wait.kind == WaitKind.TIMED and tid != pid and key not in withdrawn


def housekeepers(
    history: Sequence[Look], withdrawn: Collection[tuple[int, int]] = ()
) -> dict[tuple[int, int], str]:
    """The threads of the last look that are housekeeping, each with why; {} unless the
    rest of the tree waits on the tree (at least one thread) or is done. `withdrawn`: the
    threads whose stacks showed the program's own code, never excused again in this run."""
    if not history:
        return {}
    last = history[-1]
    if last.io is None:
        return {}
    kinds = [w.kind for w in last.waits.values()]
    if WaitKind.TREE not in kinds:
        return {}  # only housekeeping and sleepers: idle, not deadlocked
    keys = [k for k, w in last.waits.items() if candidate(k, w, withdrawn)]
    others = [w for k, w in last.waits.items() if k not in keys]
    if not keys or not all(w.kind in (WaitKind.TREE, WaitKind.DONE) for w in others):
        return {}
    start = _span_start(history, keys)
    first = history[start]
    span, looks = last.snap.t - first.snap.t, len(history) - start
    if span < SPAN_S - 1e-6 or looks < LOOKS:
        return {}
    before, now = _threads(first.snap), _threads(last.snap)
    found: dict[tuple[int, int], str] = {}
    for k in keys:
        if _wakes(before[k], now[k]) < MIN_WAKES:
            continue  # one long sleep (a task's time.sleep) is not housekeeping
        if now[k].cpu_time - before[k].cpu_time <= max(CPU_TICK, CPU_SHARE * span) + 1e-9:
            found[k] = _why(last.waits[k], before[k], now[k], span, looks)
    return found


# ---------------------------------------------------------------- the stack check

# native frames that run Python code: a thread showing one runs the interpreter, and only
# its Python stack can say whose code that is
_INTERPRETER = ("_PyEval_", "PyEval_", "_PyObject_Call", "PyObject_Call", "_PyFunction_")
_INTERPRETER_MODULE = re.compile(r"^(lib)?python\d")
# Python code with no file: `python -c`, a script on stdin (the program's own code, which
# `Frame.own` does not mark); exec()'d code is taken as the program's, too
_NO_FILE = ("<string>", "<stdin>")


# installed packages and the stdlib are library code even under `harness run`'s own root
# (a project's .venv inside the built tree)
_LIBRARY = re.compile(r"/lib(64)?/python\d+(\.\d+)?[a-z]?/|/(site|dist)-packages/")


def _own(frame: Frame, python: bool) -> bool:
    if python and (frame.file or "") in _NO_FILE:
        return True
    path = frame.file if python else frame.module
    return frame.own and not (path and _LIBRARY.search(path))


def _interpreter(frame: Frame) -> bool:
    module = os.path.basename(frame.module or "")
    return frame.function.startswith(_INTERPRETER) or bool(_INTERPRETER_MODULE.match(module))


def _site(frame: Frame) -> str:
    where = f" at {frame.file}:{frame.line}" if frame.file and frame.line else ""
    return f"{frame.function}{where}"


def stack_check(key: tuple[int, int], stacks: Sequence[ThreadStack], python: bool) -> str | None:
    """None when an excused thread's stacks at the dump show only runtime and library
    frames (multiprocessing's handlers, a resource tracker, torch/gloo threads, libgomp):
    it stays excused. Otherwise why it is withdrawn: a frame of the program's own code
    (`Frame.own`) in its Python or native stack, no stack of it (no tool, ptrace denied),
    or, in a Python process, a native stack running the interpreter with no Python stack
    to say whose code it runs. `python`: the process runs Python."""
    tid = key[1]
    mine = [s for s in stacks if (s.pid, s.tid) == key and s.frames]
    if not mine:
        return f"tid {tid}: no stack of it was taken, so its code cannot be told from the program's"
    for st in mine:
        own = next((f for f in st.frames if _own(f, st.python)), None)
        if own is not None:
            return f"tid {tid}: its stack shows the program's own code ({_site(own)})"
    native_only = python and not any(s.python for s in mine)
    if native_only and any(_interpreter(f) for s in mine for f in s.frames):
        return f"tid {tid}: it runs Python code and no Python stack of it was taken"
    return None


def library_frames(key: tuple[int, int], stacks: Sequence[ThreadStack]) -> str:
    """The evidence of a thread kept excused: its innermost frames, Python's if taken."""
    mine = [s for s in stacks if (s.pid, s.tid) == key and s.frames]
    mine.sort(key=lambda s: not s.python)
    shown = " <- ".join(_site(f) for f in mine[0].frames[:3]) if mine else "?"
    return f"its stack at the dump shows only runtime and library code ({shown})"


# A thread caught between two wake-ups of a timed loop: runnable at the last look (on a
# loaded machine a thread that wakes every 50 ms is often seen waiting for a CPU), asleep on
# a timer of its own at a look at most this long before, and with CPU under BETWEEN_SHARE of
# the time since: its wait is that sleep, not "running"
BETWEEN_S = 2.0
BETWEEN_SHARE = 0.1


def between_wakeups(looks: Sequence[Look]) -> dict[tuple[int, int], Wait]:
    """Each thread runnable at the last look between two wake-ups of a timed loop, with the
    timed wait it was last seen asleep in: the looks before the last, newest first, up to
    BETWEEN_S back, must show it only runnable until it shows that sleep (any other wait in
    between, a pipe read, a lock, says it was woken by something else), and its CPU since
    must stay under BETWEEN_SHARE of the time."""
    if not looks:
        return {}
    last = looks[-1]
    now = _threads(last.snap)
    running = [k for k, w in last.waits.items() if w.kind is WaitKind.RUNNING and k in now]
    if not running:
        return {}
    earlier = [(look, _threads(look.snap)) for look in reversed(looks[:-1])]
    found: dict[tuple[int, int], Wait] = {}
    for key in running:
        for look, threads in earlier:
            span = last.snap.t - look.snap.t
            w, th = look.waits.get(key), threads.get(key)
            if span > BETWEEN_S or w is None or th is None:
                break
            if w.kind is WaitKind.RUNNING:
                continue
            asleep = w.kind in (WaitKind.TIMED, WaitKind.HOUSEKEEPING) and w.idle
            if asleep and now[key].cpu_time - th.cpu_time <= max(BETWEEN_SHARE * span, CPU_TICK):
                found[key] = w
            break
    return found
