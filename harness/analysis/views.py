"""Views over a sample set that several detectors share: the processes, a process's
stacks, which runtime a stack runs in, the frame that names where a thread is."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from harness.sampling.model import Frame, ProcessSample, SampleSet, ThreadStack

# OpenMP runtimes, by name: a frame the sampler identified (Frame.runtime) is matched by its
# runtime's canonical name ("libgomp" for a wheel's libgomp-e985bcbb.so.1.0.0), one it did
# not examine by its file name (`uses`)
OPENMP_MODULES = re.compile(r"lib(gomp|omp|iomp5)\.so")
WAIT_FUNCTIONS = re.compile(
    r"(recv\w*|read|poll|ppoll|select|pselect\d*|epoll_wait|wait4|waitpid|waitid)"
    r"|(\w+\.)?(recv|_recv|_recv_bytes|poll|wait|get|_poll)"
)
# glibc's internal names of the same calls: __GI___libc_read, __libc_recv, __poll …
_GLIBC_PREFIX = re.compile(r"^(__GI_)?_*(libc_)?")


def waits(function: str) -> bool:
    """A call that waits for another process (a read, a poll, a waitpid …)."""
    return bool(WAIT_FUNCTIONS.fullmatch(_GLIBC_PREFIX.sub("", function)))


def processes(s: SampleSet) -> dict[int, ProcessSample]:
    """The last sighting of every process sampled."""
    seen: dict[int, ProcessSample] = {}
    for snap in s.snapshots:
        for p in snap.processes:
            seen[p.pid] = p
    return seen


def stacks_of(s: SampleSet, pid: int, native_only: bool = False) -> list[ThreadStack]:
    return [st for st in s.stacks if st.pid == pid and not (native_only and st.python)]


def module_name(f: Frame) -> str:
    """The name a runtime pattern sees for a frame's module: for a module the sampler
    identified, its runtime's canonical name as a file name ("libgomp.so", whatever the
    file is called); "" for one it read and found to be none of the runtimes it knows (a
    library merely named libgomp.so is not libgomp); else the file's base name."""
    if f.runtime is not None:
        return f"{f.runtime}.so" if f.runtime else ""
    return (f.module or "").rsplit("/", 1)[-1]


def uses(frames: Iterable[Frame], pattern: re.Pattern[str]) -> str | None:
    """The module of the first frame whose `module_name` `pattern` finds, if any: its base
    name, and the runtime it is when the name does not say it
    ("libgomp-e985bcbb.so.1.0.0 (libgomp)")."""
    for f in frames:
        name = module_name(f)
        if name and pattern.search(name):
            base = (f.module or "").rsplit("/", 1)[-1] or name
            if f.runtime and not base.startswith(f"{f.runtime}.so"):
                return f"{base} ({f.runtime})"
            return base
    return None


def top(frames: Sequence[Frame], skip: re.Pattern[str] | None = None) -> str:
    """The innermost own frame (the program's code), else the innermost named one."""
    own = [f for f in frames if f.own]
    for f in own or frames:
        if f.function != "??" and not (skip and skip.fullmatch(f.function)):
            where = f" ({f.file.rsplit('/', 1)[-1]}:{f.line})" if f.file and f.line else ""
            return f"{f.function}{where}"
    return "??"


def stack_line(st: ThreadStack, n: int = 4) -> str:
    return " ← ".join(f.function for f in st.frames[:n])
