"""Where a hang sits: the threads as the classifier sees them, the program's own frame in a
stack (a pin signature first, else the innermost own frame), the runtime patterns under it,
and which stuck thread names the location.

A thread that only waits (a parent in `waitpid`, `Popen.wait`, `Process.join`, a caller
in `Pool.map` or `Future.result`, a `Thread.join`: analysis/waitchain.py) is never where a
hang sits while another thread can be located: the location is where the wait-for chain
ends, with that thread's Python and native frames. Only when the chain ends at a process
that is gone (a killed pool worker), or nothing at its end runs code of the program or a
Python library, is the waiter itself the location, and the evidence says why.

Two Python refinements: a script's top level (`<module>`) names a file, not a function, so
among stuck threads one that stands in a function of the program names the hang (the
handler's `emit` of a lock-order cycle); and a Python line that called into a native
extension now waiting in an OpenMP region (`…_omp_fn.0` over the runtime's barrier, in a
wheel's renamed libgomp too) is located in that region, its Python frames in the evidence.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import waitchain
from harness.config.signatures import Signatures
from harness.sampling.model import Frame, SampleSet, ThreadStack, spinning
from harness.sampling.runtimes import OPENMP_RUNTIMES
from harness.sampling.waits import ThreadWait, Waiter


def frame_text(frame: Frame) -> str:
    where = (frame.file or frame.module or "").rsplit("/", 1)[-1]
    if where and frame.line:
        where = f"{where}:{frame.line}"
    return f"{frame.function} ({where})" if where else frame.function


@dataclass
class ThreadView:
    """One thread as the classifier sees it: activity across snapshots plus its stack (the
    Python one for a Python thread: it names the program's function), what it waited on
    at the trigger, and whether it only waits for a child, a result or a thread."""

    pid: int
    tid: int
    name: str
    states: list[str]
    cpu_fraction: float
    wchan: str
    stack: ThreadStack | None
    wait: ThreadWait | None = None
    waiter: Waiter | None = None

    @property
    def is_main(self) -> bool:
        return self.pid == self.tid

    @property
    def busy(self) -> bool:
        return spinning(self.states, self.cpu_fraction)

    @property
    def last_state(self) -> str:
        return self.states[-1] if self.states else "?"


def views(samples: SampleSet) -> list[ThreadView]:
    stacks: dict[tuple[int, int], ThreadStack] = {}
    for st in samples.stacks:
        # prefer a Python stack for Python threads: it names the user's function
        key = (st.pid, st.tid)
        if key not in stacks or st.python:
            stacks[key] = waitchain.live_frames(st)
    waits = {(w.pid, w.tid): w for w in samples.waits}
    out = [
        ThreadView(
            a.pid, a.tid, a.name, a.states, a.cpu_fraction, a.wchan, stacks.get((a.pid, a.tid))
        )
        for a in samples.activity
    ]
    known = {(a.pid, a.tid) for a in samples.activity}
    for key, st in stacks.items():  # a stack without activity (thread born after snapshots)
        if key not in known:
            out.append(ThreadView(st.pid, st.tid, st.name, [], 0.0, "", st))
    for v in out:
        v.wait = waits.get((v.pid, v.tid))
        v.waiter = waitchain.waiter(v.stack, v.wait)
    return out


@dataclass
class Located:
    name: str
    own_index: int  # index of the located own frame in the stack (innermost = 0)
    named: bool  # True when a pin signature matched


def locate(stack: ThreadStack, sigs: Signatures) -> Located | None:
    frames = stack.frames
    for i, frame in enumerate(frames):  # the innermost frame that a named location matches
        for sig in sigs.own:
            if sig.matches(frame):
                return Located(sig.name, i, True)
    for i, frame in enumerate(frames):
        if frame.own and frame.function not in ("??", ""):
            return Located(frame.function, i, False)
    return None


def locate_in_library(stack: ThreadStack) -> Located | None:
    """A Python thread with no frame of the program (a multiprocessing queue's feeder
    thread): the caller of the library module it is blocked in (`Queue._feed`, which
    called `Connection.send_bytes`), so the location names what the thread was doing."""
    frames = stack.frames
    if not stack.python or not frames:
        return None
    blocked_in = frames[0].file
    for i, frame in enumerate(frames):
        if frame.file != blocked_in and frame.function not in ("??", ""):
            return Located(frame.function, i, False)
    return Located(frames[0].function, 0, False)


def runtime_names(frames: Sequence[Frame], sigs: Signatures) -> list[str]:
    names: list[str] = []
    for frame in reversed(frames):  # outermost first: "libgomp team start" before "futex wait"
        for pat in sigs.runtime:
            if pat.matches(frame) and pat.name not in names:
                names.append(pat.name)
    return names


def is_passive(view: ThreadView, sigs: Signatures) -> bool:
    """The thread only waits for another thread or process to finish or to answer."""
    if view.waiter is not None:
        return True
    if view.stack is None:
        return view.wchan in ("do_wait", "kernel_wait4")
    frames = view.stack.frames
    own = next((i for i, f in enumerate(frames) if f.own), min(len(frames), 6))
    return any(p.passive and p.matches(f) for f in frames[:own] for p in sigs.runtime)


MODULE = "<module>"  # py-spy's name for the top level of a module or script


def pick_location(
    culprits: list[ThreadView], sigs: Signatures
) -> tuple[Located, ThreadView] | None:
    found = [(loc, v) for v in culprits if v.stack and (loc := locate(v.stack, sigs))]
    if not found:
        return None
    named = [(loc, v) for loc, v in found if loc.named]
    if named:
        order = {sig.name: i for i, sig in enumerate(sigs.own)}
        return min(named, key=lambda lv: (order.get(lv[0].name, 99), not lv[1].is_main))
    # a script's top level (`<module>`) names a file, not a function: a stuck thread that
    # stands in a function of the program says more (the emit that took a lock)
    found = [(loc, v) for loc, v in found if loc.name != MODULE] or found
    common = Counter(loc.name for loc, _ in found).most_common(1)[0][0]
    candidates = [(loc, v) for loc, v in found if loc.name == common]
    return min(candidates, key=lambda lv: not lv[1].is_main)


def at_chain_end(
    all_views: list[ThreadView], samples: SampleSet, sigs: Signatures, evidence: list[str]
) -> tuple[Located, ThreadView] | None:
    """No stuck thread names the program: locate where the wait-for chain ends (in its
    library frames when it has no own ones), else at the waiter, saying why."""
    waiting = [v for v in all_views if v.waiter is not None]
    if not waiting:
        return None
    chain = waitchain.follow(samples)
    if chain is not None and chain.end is not None and not chain.idle_end:
        end = next((v for v in all_views if (v.pid, v.tid) == chain.end), None)
        if end is not None and end.stack is not None:
            loc = locate(end.stack, sigs) or locate_in_library(end.stack)
            if loc is not None:
                why = (
                    "it waits for a result that no thread or process is left to produce"
                    if chain.stranded
                    else "not at the thread that waits for it"
                )
                evidence.append(
                    f"located where the wait-for chain ends (pid {end.pid} tid {end.tid}), {why}"
                )
                return loc, end
    picked = pick_location(waiting, sigs)
    if picked is not None:
        if chain is not None and chain.dead is not None:
            why = f"pid {chain.dead.pid} is gone ({chain.dead.status}): no stack to locate in"
        elif chain is not None and chain.idle_end:
            why = "a thread waits for input from the waiter itself: nothing there runs"
        else:
            why = "nothing runs code of the program"
        evidence.append(f"located at the waiting thread: the wait-for chain ends where {why}")
    return picked


def ends_in(chain: waitchain.Chain, samples: SampleSet, location: str | None) -> bool:
    """The located function is on the stack of the thread the chain ends at."""
    if chain.end is None or not location:
        return False
    return any(
        f.function == location
        for st in samples.stacks
        if (st.pid, st.tid) == chain.end
        for f in st.frames
    )


NATIVE_SHOWN = 6  # native frames of a Python location named in the evidence


def native_under(view: ThreadView, samples: SampleSet) -> list[Frame]:
    """The native frames of a thread located by its Python stack, innermost first, up to
    the interpreter's eval loop: the syscall or runtime wait under the Python line."""
    if view.stack is None or not view.stack.python:
        return []
    for st in samples.stacks:
        if (st.pid, st.tid) == (view.pid, view.tid) and not st.python:
            inner = []
            for frame in st.frames:
                if frame.function.startswith("_PyEval_"):
                    break
                inner.append(frame)
            return inner
    return []


# an OpenMP parallel region outlined by GCC (`f._omp_fn.0`) or clang (`.omp_outlined.`,
# `__omp_outlined__3`), and the runtime's own entry points, whatever file ships them
_OUTLINED = re.compile(r"\._omp_fn\.\d+|\.omp_outlined\.|__omp_outlined__")
_OPENMP_ENTRY = re.compile(r"gomp_|GOMP_|__kmp_|__kmpc_")


def openmp_region(native: Sequence[Frame]) -> int | None:
    """The index in `native` (a Python location's native frames, innermost first) of the
    OpenMP region its thread waits in: an outlined region function with an OpenMP runtime
    frame inward of it (the team barrier). The Python line only called the extension; the
    region is where the team it waits for never arrives (a fork()ed child's pool)."""
    for i, frame in enumerate(native):
        if _OUTLINED.search(frame.function):
            inward = native[:i]
            if any(f.runtime in OPENMP_RUNTIMES or _OPENMP_ENTRY.match(f.function) for f in inward):
                return i
            return None
    return None


def located_frame(
    location: str | None, samples: SampleSet | None
) -> tuple[ThreadStack, Frame] | None:
    """The stack and the own frame the location names, with a file and line (OpenMP
    outlined copies such as env_start._omp_fn.0 count as the function)."""
    if not location or samples is None:
        return None
    for stack in samples.stacks:
        for frame in stack.frames:
            name = frame.function.split("._omp_fn", 1)[0]
            if frame.own and name == location and frame.file and frame.line:
                return stack, frame
    return None


def path_in_tree(file: str, tree: Path) -> Path | None:
    """A frame's file relative to the build tree, or None when it lies outside: DWARF names
    files as the compiler saw them, absolute or relative to the tree it ran in."""
    path = Path(file)
    if not path.is_absolute():
        return path
    return path.relative_to(tree) if path.is_relative_to(tree) else None
