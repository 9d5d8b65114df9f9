"""The stack tools, one record each, in order of preference: `TOOLS`. Everything that differs
between tools is here (how each is invoked, how it attaches, which parser reads it, how it is
installed); `stacks.py` runs them, the CLI's `--native`/`--python-stacks` choices and the
doctor's tool hints are derived from this registry. `auto` means the first tool of its kind
on PATH, in registry order (native: eu-stack, else gdb).

Adding a tool: a `StackToolName` member (harness/vocab.py), its parser (parsers.py), one
record in `TOOLS` at its place in the order, and a line in the README.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.sampling.frames import FrameContext
from harness.sampling.model import ThreadStack
from harness.sampling.parsers import Location, parse_eu_stack, parse_gdb, parse_py_spy
from harness.vocab import AUTO, StackToolKind, StackToolName

NONE = "none"
# eu-stack's companion: names the addresses of an `eu-stack -q` dump from the mapped files
# and /proc/PID/maps, without attaching (see stacks.py)
EU_ADDR2LINE = "eu-addr2line"


@dataclass(frozen=True)
class Attach:
    """How a tool gets at a process."""

    ptrace: bool  # attaches with ptrace: refused under ptrace_scope or without CAP_SYS_PTRACE
    stops: bool  # the process is stopped while the tool reads it (once per tool per process)


@dataclass(frozen=True)
class Invocation:
    """What a tool's command line depends on."""

    path: str  # the tool's executable
    pid: int  # the thread to attach through (a live one: the main thread may be a zombie)
    named: bool = False  # the tool's namer is on PATH and names the frames afterwards
    py_native: bool = False  # a Python tool also merges in native frames
    py_locals: bool = False  # a Python tool also shows each frame's locals (callranks.py)


@dataclass(frozen=True)
class Dump:
    """One tool run on one process, as its parser reads it."""

    stdout: str
    stderr: str
    pid: int
    ctx: FrameContext
    names: Mapping[int, Sequence[Location]] | None = None  # the namer's, by address

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass(frozen=True)
class StackTool:
    name: StackToolName
    kind: StackToolKind
    attach: Attach
    argv: Callable[[Invocation], list[str]]
    parse: Callable[[Dump], list[ThreadStack]]  # may raise on output it cannot read
    install: str  # how to get it (the doctor's hint)
    cost: str  # what one dump of a process costs, for the doctor's hint
    namer: str | None = None  # a companion tool that names this tool's addresses


def _gdb_argv(i: Invocation) -> list[str]:
    # -iex runs before the attach: debuginfod would otherwise try the network
    sets = ["debuginfod enabled off", "pagination off", "width 0", "print frame-arguments none"]
    pre = [a for s in sets[:1] for a in ("-iex", f"set {s}")]
    post = [a for s in sets[1:] for a in ("-ex", f"set {s}")]
    info = ["-ex", "set print frame-info location-and-address", "-ex", "thread apply all bt"]
    return [i.path, "-p", str(i.pid), "-batch", "-nx", *pre, *post, *info]


def _eu_stack_argv(i: Invocation) -> list[str]:
    # -a: which frames are return addresses (named by the call, one byte back); -m module;
    # -q no names (eu-addr2line's job), else -s FILE:LINE, -i inlined frames
    names = ["-q"] if i.named else ["-s", "-i"]
    return [i.path, "-p", str(i.pid), "-a", "-m", *names]


def _py_spy_argv(i: Invocation) -> list[str]:
    native = ["--native"] if i.py_native else []
    values = ["--locals"] if i.py_locals else []
    return [i.path, "dump", "--pid", str(i.pid), "--json", *native, *values]


def _eu_stack_parse(d: Dump) -> list[ThreadStack]:
    return parse_eu_stack(d.stdout, d.pid, d.ctx, d.names)  # complaints go to stderr


def _gdb_parse(d: Dump) -> list[ThreadStack]:
    return parse_gdb(d.output, d.pid, d.ctx)  # gdb mixes both streams usefully


def _py_spy_parse(d: Dump) -> list[ThreadStack]:
    return parse_py_spy(d.stdout, d.pid, d.ctx)  # JSON on stdout, diagnostics on stderr


TOOLS: tuple[StackTool, ...] = (
    StackTool(
        StackToolName.EU_STACK,
        StackToolKind.NATIVE,
        Attach(ptrace=True, stops=True),
        _eu_stack_argv,
        _eu_stack_parse,
        install="install elfutils (eu-stack, eu-addr2line)",
        cost="0.01-0.06 s per process",
        namer=EU_ADDR2LINE,
    ),
    StackTool(
        StackToolName.GDB,
        StackToolKind.NATIVE,
        Attach(ptrace=True, stops=True),
        _gdb_argv,
        _gdb_parse,
        install="install gdb",
        cost="0.3-10 s per process, mostly reading symbols",
    ),
    StackTool(
        StackToolName.PY_SPY,
        StackToolKind.PYTHON,
        Attach(ptrace=True, stops=True),
        _py_spy_argv,
        _py_spy_parse,
        install="pip install py-spy",
        cost="0.02-0.06 s per process",
    ),
)


def by_name(name: str) -> StackTool:
    return next(t for t in TOOLS if t.name == name)


def of_kind(kind: StackToolKind) -> tuple[StackTool, ...]:
    return tuple(t for t in TOOLS if t.kind == kind)


def choices(kind: StackToolKind) -> list[str]:
    """The values of the option that picks a tool of this kind: auto, each tool, none."""
    return [AUTO, *(t.name.value for t in of_kind(kind)), NONE]


def wanted(kind: StackToolKind, choice: str) -> tuple[StackTool, ...]:
    """The tools a choice asks for, in order of preference (auto: all of its kind)."""
    if choice not in choices(kind):
        raise ValueError(f"{kind} stack tool: {choice!r} is not one of {', '.join(choices(kind))}")
    if choice == NONE:
        return ()
    return of_kind(kind) if choice == AUTO else (by_name(choice),)


def auto_text(kind: StackToolKind) -> str:
    """What `auto` means, for the option's help: "eu-stack, else gdb"."""
    return ", else ".join(t.name.value for t in of_kind(kind))
