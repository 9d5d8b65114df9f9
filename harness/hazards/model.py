"""The typed results of `--hazards`: report.json `hazards` (docs/report-schema.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.vocab import HazardKind

FRAMES_SHOWN = 6  # frames of a stack in a report's text
THREADS_SHOWN = 8  # threads of a fork in a report's text


@dataclass(frozen=True)
class Site:
    """One frame: a function and, where the debug info says, its file and line."""

    function: str
    file: str = ""  # the source file's base name, "" when unknown
    line: int = 0
    module: str = ""  # the object file (native) or "python"

    def label(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file else ""
        return f"{self.function}{where}"

    def names(self) -> list[str]:
        """What `--expect hazard:KIND:LOCATION` may name this frame by: its function, its
        file:line and its file."""
        out = [self.function]
        if self.file:
            out += [f"{self.file}:{self.line}", self.file]
        return out


@dataclass(frozen=True)
class ThreadAtFork:
    """A thread alive when the process forked."""

    tid: int
    name: str
    start: str = ""  # its start routine (native) or target (Python), "" when unknown
    runtime: str = ""  # the runtime its start routine lies in (libgomp, libomp …), "" for none
    stack: list[Site] = field(default_factory=list)  # Python threads: their stack then
    held: list[str] = field(default_factory=list)  # the locks it held: "lock_a at f (x.c:3)"

    def describe(self) -> str:
        what = f"{self.name} (tid {self.tid})" + (f", {self.start}" if self.start else "")
        if self.stack:
            what += f": {_frames(self.stack)}"
        if self.held:
            what += f"; held {', '.join(self.held)}"
        return what


@dataclass(frozen=True)
class Hazard:
    """One hazard of the run: what, where, the evidence, and what it does on which runtime."""

    kind: HazardKind
    where: str  # the place it is reported at: "function (file:line)"
    summary: str  # one line: "fork() with an OpenMP team of 2 alive (libomp) at …"
    consequence: str  # what it would do, on which runtime or host
    pid: int
    location: str = ""  # the function it is reported at
    # the function whose call makes it a hazard: a fork's child entering the runtime (or
    # taking the lock), a cycle's first order; what triage's History bisects for
    trigger: str = ""
    # every name `--expect hazard:KIND:LOCATION` matches: the place, and for a fork the
    # child's entry into the runtime; for a lock-order cycle the call sites of every order
    locations: list[str] = field(default_factory=list)
    count: int = 1  # occurrences folded into this one (the same fork site, the same cycle)
    stack: list[Site] = field(default_factory=list)  # the forking thread, innermost first
    python_stack: list[Site] = field(default_factory=list)
    threads: list[ThreadAtFork] = field(default_factory=list)
    runtime: str = ""  # fork: the OpenMP runtime with a team alive ("" for none)
    child: str = ""  # fork: what the child did before exec ("entered libomp at …")
    # lock order: each edge of the cycle, "lock_a at f (x.c:10) then lock_b at f (x.c:12)
    # (thread t)"
    cycle: list[str] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)  # lock order: both call sites of each edge
    expected: bool = False  # it matches the run's --expect hazard:…

    def line(self) -> str:
        """The hazard and what it would do, in one line."""
        return f"{self.summary}; {self.consequence.split(';')[0]}"

    def facts(self) -> list[tuple[str, str]]:
        """The evidence as (label, text) pairs, the same in every format of the report."""
        rows = [("what it does", self.consequence)]
        if self.count > 1:
            rows.append(("seen", f"{self.count} times"))
        if self.stack:
            rows.append(("forking thread", _frames(self.stack)))
        if self.python_stack:
            rows.append(("Python stack", _frames(self.python_stack)))
        if self.threads:
            shown = [t.describe() for t in self.threads[:THREADS_SHOWN]]
            more = len(self.threads) - THREADS_SHOWN
            rows.append(
                ("threads alive", "; ".join(shown) + (f"; … {more} more" if more > 0 else ""))
            )
        if self.child:
            rows.append(("the child", self.child))
        rows += [("order", c) for c in self.cycle]
        if self.expected:
            rows.append(("expected", "the hazard --expect looks for"))
        return rows


@dataclass
class HazardReport:
    """What the run's hazard records said: the hazards, and what could not be seen."""

    hazards: list[Hazard] = field(default_factory=list)
    processes: int = 0  # processes that wrote records (native shim or Python hook)
    forks: int = 0  # forks seen beside other threads or after an OpenMP team
    safe_forks: int = 0  # … of which the child exec'd, or touched nothing the fork copied
    notes: list[str] = field(default_factory=list)  # records dropped, files unreadable
    expect: str = ""  # the run's --expect hazard:KIND[:LOCATION], "" for none

    @property
    def expected(self) -> list[Hazard]:
        return [h for h in self.hazards if h.expected]

    def line(self) -> str:
        """The summary's line: "none" or "1 hazard: <the first> (+2 more)"."""
        if not self.hazards:
            procs = f"{self.processes} process{'es' if self.processes != 1 else ''}"
            safe = self.safe_forks
            forks = (
                f"; {safe} fork{'s' if safe != 1 else ''} beside threads whose child touched "
                "neither their runtime nor their locks"
                if safe
                else ""
            )
            return f"none ({procs} recorded{forks})"
        n = len(self.hazards)
        first = self.expected[0] if self.expected else self.hazards[0]
        more = f" (+{n - 1} more)" if n > 1 else ""
        return f"{n} hazard{'s' if n != 1 else ''}: {first.line()}{more}"


def _frames(sites: list[Site]) -> str:
    return " ← ".join(s.label() for s in sites[:FRAMES_SHOWN])
