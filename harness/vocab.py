"""The closed vocabularies of the harness, each defined once. Every field whose value comes
from a fixed set is typed with one of these; report.json, the pins and the CLI keep the
same strings (a `StrEnum` member *is* its string, so JSON and comparisons are unchanged).
Verdict kinds live with their exit codes in `harness.outcome` (`Kind`).

A new member is a new word in the documented schema: add it here, and the docs tests
(tests/test_docs.py) say which page must mention it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, TypeVar

E = TypeVar("E", bound=StrEnum)


# the word of an option that lets the harness choose (--native auto, --repeat auto, a
# bisect's --runs auto): one spelling everywhere
AUTO: Final = "auto"


class RunMode(StrEnum):
    """Which command made a report (report.json mode)."""

    RUN = "run"  # `harness run`
    WATCH = "watch"  # `harness watch`
    ATTACH = "attach"  # `harness attach PID`
    PYTEST = "pytest"  # a hung test seen by the pytest plugin's watcher (`pytest --hang-watch`)


class RunStatus(StrEnum):
    """Where a report stands (report.json status)."""

    RUNNING = "running"  # the harness is at it
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    # the harness died without finishing the report: found out by whoever opens it later
    # (report.store.load_status)
    ABANDONED = "abandoned"


class Stage(StrEnum):
    """The stages a run passes, in order; report.json is rewritten at each."""

    START = "start"
    PIN = "pin"
    PREPARE = "prepare"
    BUILD = "build"
    RUN = "run"
    CHECK = "check"
    DONE = "done"


class Mechanism(StrEnum):
    """How a hang hangs (verdict.mechanism)."""

    DEADLOCK = "deadlock"  # every thread blocked
    SPIN = "spin"  # a thread burns CPU while the others wait
    EXIT_BLOCKED = "exit-blocked"  # the main thread finished, others keep the process alive
    STOPPED = "stopped"  # SIGSTOPped / traced
    # every live thread only sleeps on a timer (nanosleep, a timed wait): no waker is needed
    IDLE = "idle"


class Trigger(StrEnum):
    """What ended the watching (report.json trigger); watch/watchdog.py decides it."""

    STARTUP = "startup"  # no first progress within the startup window
    STALL = "stall"  # progress stopped for longer than the stall window
    WALL = "wall"  # total wall-clock limit reached
    # every thread blocked on the tree (no CPU, no output) for the quiescence window
    QUIESCENT = "quiescent"
    EXIT = "exit"  # the process exited on its own
    INTERRUPT = "interrupt"  # the harness itself was interrupted
    # `harness attach`: its window ended before the tree was quiescent (judged from stacks)
    DURATION = "duration"
    # a set of blocked threads that only each other could wake (the wake graph), stable for
    # the confirmation window, even while the rest of the run keeps running
    CLOSED = "closed"


class RunCwd(StrEnum):
    """Where a pin's trainer runs ([run] cwd)."""

    # a folder of the run's own in its report that shows the build tree's entries through
    # links, but those the trainer writes ([run] writes) fresh: upstream reads ./config
    TREE = "tree"
    REPORT = "report"  # a fresh, empty folder in the run's report


class StackToolKind(StrEnum):
    """What a stack tool reads (sampling/tools.py TOOLS): --native and --python-stacks."""

    NATIVE = "native"  # every thread's native frames: eu-stack, gdb
    PYTHON = "python"  # a Python process's Python frames: py-spy


class StackToolName(StrEnum):
    """The stack tools (sampling/tools.py TOOLS): a frame's source, a --native choice."""

    EU_STACK = "eu-stack"
    GDB = "gdb"
    PY_SPY = "py-spy"


class Need(StrEnum):
    """An input a detector looks at (analysis/detectors/registry.py `@detector(needs=…)`;
    the "needs" column of docs/pin-schema.md's detector table)."""

    SAMPLES = "samples"  # the sample set: stacks, snapshots, timeline, events, lock cycles
    OUTPUT = "output"  # the tail of the command's output
    # the run's history from its start (in the samples' events and timeline): a fork or a
    # death before the first look is missing from a watch that attached later
    HISTORY = "history"


class CheckOver(StrEnum):
    """Which of a key's dashboard values a range check bounds (a scenario check's `over`)."""

    ALL = "all"  # every frame's value
    LAST = "last"  # the last frame's


class SourceKind(StrEnum):
    """Where a pin's source comes from ([source] kind)."""

    GIT = "git"
    PYPI = "pypi"
    PATH = "path"


class VariantKind(StrEnum):
    """One change a variant makes to the source."""

    OMP_FREE = "omp-free"
    PATCH = "patch"
    REF = "ref"
    ENV = "env"


class BisectRole(StrEnum):
    """Why a commit was tested during a bisect."""

    GOOD_END = "good-end"
    BAD_END = "bad-end"
    SEARCH = "search"
    CONFIRM_FIX = "confirm-fix"
    STEP = "step"


class BisectStatus(StrEnum):
    RUNNING = "running"
    FOUND = "found"
    RANGE = "range"
    # the posterior search: the bad end is no worse than the commits before it
    NOT_REPRODUCED = "not-reproduced"
    UNCERTAIN = "uncertain"  # a budget ended it before any commit held --confidence
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class WaitKind(StrEnum):
    """What a thread waits on at the trigger, by the quiescence rule (docs/quiescence.md)."""

    TREE = "tree"
    TIMED = "timed"
    OUTSIDE = "outside"
    RUNNING = "running"
    UNKNOWN = "unknown"
    DONE = "done"
    # only a periodic timed wake-up, negligible CPU, nothing changed: a housekeeping thread
    # that does not hold back the verdict of a tree otherwise blocked on itself
    HOUSEKEEPING = "housekeeping"


class WakeEnd(StrEnum):
    """Where a wake chain ends (watch/wakegraph.py): why nothing ends the first wait."""

    CYCLE = "cycle"  # back to a thread already on the chain: they wait for each other
    NOBODY = "nobody"  # no live thread could end the wait (a private futex, its only thread)
    DEAD = "dead"  # the thread or process that would end it has exited
    RUNNING = "running"  # a thread that runs: the program's code is busy there
    TIMED = "timed"  # a thread asleep on a timer: a sleep, or a polling loop
    # asleep on a timer that ends only after the run's wall limit (a `sleep 600` holding a
    # pipe): it does wake by itself, but after the verdict
    LATE = "late"
    OUTSIDE = "outside"  # a peer outside the run, or anyone (a listening socket, a path)
    STOPPED = "stopped"  # a stopped or traced process (state T, t)
    UNINTERRUPTIBLE = "uninterruptible"  # state D: the kernel, disk or a driver
    UNKNOWN = "unknown"  # what it waits on cannot be read


class FutexKind(StrEnum):
    """What a futex wait is, read from the futex word and the mutex around it
    (sampling/locks.py, `FutexWait.what`)."""

    MUTEX = "mutex"  # a normal (recursive, errorcheck, adaptive) pthread mutex
    ROBUST_MUTEX = "robust mutex"
    PI_MUTEX = "pi mutex"  # priority inheritance
    NOT_A_MUTEX = "not a mutex"  # a condition variable, a barrier, a semaphore …
    UNKNOWN = "unknown"  # a candidate whose owner or kind could not be confirmed

    @property
    def is_mutex(self) -> bool:
        return self in (FutexKind.MUTEX, FutexKind.ROBUST_MUTEX, FutexKind.PI_MUTEX)


class WaitsFor(StrEnum):
    """What a thread that only waits waits for, by the call it waits in
    (sampling/waits.py, `WAIT_CALLS`)."""

    CHILD = "child"  # a child process: Popen.wait, Process.join, wait4
    RESULT = "result"  # a pool's or an executor's result: Pool.map, Future.result
    THREAD = "thread"  # a thread: Thread.join, pthread_join


class WaitVia(StrEnum):
    """What a waiting thread waits on, by kind of kernel object (the wake graph's links,
    watch/wakegraph.py): what the graph's readings (the wake-chain causes) match on."""

    FUTEX = "futex"  # a futex: a condition, an event, a semaphore, a lock with no owner read
    MUTEX = "mutex"  # a pthread mutex whose owner was read from memory
    EXIT = "exit"  # the exit of a process: wait4, waitid, a pidfd
    PIPE = "pipe"  # an anonymous pipe
    SOCKET = "socket"  # a unix or TCP socket (a socketpair, multiprocessing.Pipe)
    FILE_LOCK = "file-lock"  # flock, fcntl F_SETLKW / F_OFD_SETLKW
    RUNTIME_LOCK = "runtime-lock"  # a runtime's lock taken by timed retry (CPython's GIL)
    EVENTFD = "eventfd"
    FILE = "file"  # a path: a FIFO opened by name, a device
    POLL = "poll"  # a poll/select/epoll over fds of more than one kind
    OTHER = "other"  # a sleep, a signal, anything not named above


class HistoryEnd(StrEnum):
    """How a triage's History step ended before a bisect could (its result's `status`,
    beside a bisect's own `BisectStatus`)."""

    NOT_REPRODUCED = "not-reproduced"  # the bad end passed here: nothing to search
    NO_GOOD = "no-good"  # no passing commit found back from the bad end


class BisectClass(StrEnum):
    """What one tested commit is, for `git bisect` (bisect/model.py)."""

    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"


class Phase(StrEnum):
    """Where a command is, for its live progress line (report/live.py): the stages before
    the run, the run and its sampling, what follows; a triage shows its step instead."""

    START = "start"
    VERIFY = "verify"  # the pin's source verified
    PREPARE = "prepare"  # the variant's source made
    BUILD = "build"
    RUN = "run"  # the trainer runs, under the watchdog
    SAMPLING = "sampling"  # a trigger fired: its threads' stacks are read
    CHECKS = "checks"  # the scenario's checks
    RUNS = "runs"  # repeated runs, one line each
    ATTACH = "attach"  # `harness attach`: watching a tree it did not start


class DiffSide(StrEnum):
    """What one side of `harness diff` is (its JSON's `a.what`, `b.what`)."""

    REPORT = "report"  # one run's report folder
    REPEAT = "repeat"  # the aggregate of repeated runs (repeat.json)


class TriageStep(StrEnum):
    """A triage's steps, in the order of the story (run order may differ: docs/triage.md)."""

    REPRODUCE = "reproduce"
    EXPLAIN = "explain"
    KNOBS = "knobs"
    FIXES = "fixes"
    HISTORY = "history"


class StepStatus(StrEnum):
    """Where a triage step stands."""

    PENDING = "pending"  # not reached yet (an interrupted triage, before --resume)
    DONE = "done"
    SKIPPED = "skipped"  # did not fit the budget, or does not apply (no git source): `reason`
    FAILED = "failed"  # could not be done (a build failed, a tool is missing): `reason`


class EventKind(StrEnum):
    """A process of the tree seen for the first time, or seen gone."""

    START = "start"
    EXIT = "exit"


class Confidence(StrEnum):
    """How sure a cause is; causes are ordered by it."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class CheckStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


class CheckKind(StrEnum):
    """A scenario check's kind ([[checks]] kind: docs/scenario-schema.md, "Check kinds")."""

    REQUIRED = "required"
    RANGE = "range"
    FINITE = "finite"
    CONFIG = "config"
    STEPS_REACHED = "steps_reached"


class TableKind(StrEnum):
    """A multi-run command's table: names its files (compare.json, sweep.md …)."""

    COMPARE = "compare"
    SWEEP = "sweep"
    REPEAT = "repeat"
    BISECT = "bisect"


class DoctorStatus(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class FileStatus(StrEnum):
    """One pinned file against the pin's hash (source/verify.py)."""

    MATCH = "match"
    DIFFERS = "differs"
    MISSING = "missing"
    UNVERIFIED = "unverified"


class SourceStatus(StrEnum):
    """A source tree against its pin as a whole."""

    VERIFIED = "verified"
    DRIFT = "drift"
    UNVERIFIED = "unverified"
    UNCHECKED = "unchecked"


class AxisKind(StrEnum):
    """A sweep axis: a trainer config knob, an environment variable, or the variant."""

    SET = "set"
    ENV = "env"
    VARIANT = "variant"
    HOST = "host"  # a hosts/*.toml profile


class Decision(StrEnum):
    """What `compare` decided on the variants' rates (pipeline/decide.py)."""

    CONFIRMED = "confirmed"  # the baseline fails, every fix's rate is separated below it
    REFUTED = "refuted"  # a fix fails as often as the baseline, or could not run
    UNSETTLED = "unsettled"  # more runs would settle it
    NOT_REPRODUCED = "not-reproduced"  # the baseline never failed


class KnobEffect(StrEnum):
    """What `sweep` decided about one knob on its cells' rates (pipeline/decide.py)."""

    CHANGES = "changes"
    RULED_OUT = "ruled-out"
    UNSETTLED = "unsettled"
    NOT_JUDGED = "not-judged"


class BlameHow(StrEnum):
    BLAME = "blame"
    LOG_S = "log -S"


class HazardKind(StrEnum):
    """What `--hazards` records in a run that may pass (docs/hazards.md)."""

    FORK_WITH_THREADS = "fork-with-threads"  # fork without exec beside other live threads
    FORK_AFTER_OPENMP = "fork-after-openmp"  # … one of them an OpenMP team's pool thread
    LOCK_ORDER = "lock-order"  # a cycle in the lock-order graph: a potential deadlock


def parse(enum: type[E], value: object, what: str) -> E:
    """`value` as a member of `enum`, or a ValueError naming what was expected."""
    try:
        return enum(str(value))
    except ValueError:
        known = ", ".join(m.value for m in enum)
        raise ValueError(f"{what}: {value!r} is not one of {known}") from None


def values(enum: type[StrEnum]) -> tuple[str, ...]:
    """The words of a vocabulary, in order (the doctor's status counts)."""
    return tuple(m.value for m in enum)
