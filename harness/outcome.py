"""The one registry of outcomes: every verdict kind once, with its exit code, whether it is a
failure, whether it reproduces a failure (for compare, bisect and sweep), and how it is shown;
and every other exit code the harness uses. Nothing else in the package spells a kind's exit
code or its flags: they read them here. README's "Exit codes" table is tested against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

from harness import vocab


class Kind(StrEnum):
    """Every verdict kind, once; `OUTCOMES` gives each its exit code and flags."""

    PASS = "pass"
    CHECK_FAILED = "check-failed"
    HANG = "hang"
    CRASH = "crash"
    ERROR_EXIT = "error-exit"
    BUILD_FAILED = "build-failed"
    TIMEOUT_PROGRESSING = "timeout-progressing"
    INTERRUPTED = "interrupted"
    ERROR = "error"  # a multi-run row whose run could not be prepared
    EXITED = "exited"  # `harness attach`: the process exited while watched
    HAZARD = "hazard"  # passed, but showed the hazard --expect hazard:… looks for


# exit codes that are not a verdict
USAGE = 5  # bad input: unknown env/scenario/variant, malformed TOML, missing checkout, drift …
INTERNAL_ERROR = 70  # a bug in the harness (EX_SOFTWARE); the traceback goes to a file
INTERRUPTED_BASE = 128  # the harness got signal N: exit 128 + N (130 SIGINT, 143 SIGTERM)
BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our stdout went away (`harness … | head`)


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    exit_code: int
    failure: bool  # the run found something wrong, or could not finish
    reproduced: bool  # a baseline with this kind reproduces the failure sought
    style: str  # rich style of the kind in summaries
    meaning: str  # one line for people (README, --help)


_ALL = (
    Outcome(Kind.PASS, 0, False, False, "bold green", "the trainer ran to the end and passed"),
    Outcome(
        Kind.CHECK_FAILED,
        1,
        True,
        True,
        "bold yellow",
        "the run finished but a scenario check failed",
    ),
    Outcome(
        Kind.HANG, 2, True, True, "bold red", "a hang: deadlock, spin, exit-blocked or stopped"
    ),
    Outcome(Kind.CRASH, 3, True, True, "bold red", "the trainer died by a signal (SIGSEGV …)"),
    Outcome(Kind.ERROR_EXIT, 3, True, True, "bold red", "the trainer exited non-zero by itself"),
    Outcome(Kind.BUILD_FAILED, 4, True, False, "bold magenta", "the upstream's build failed"),
    # the wall limit cut a run that was still making progress: too slow, not the bug sought
    Outcome(
        Kind.TIMEOUT_PROGRESSING,
        6,
        True,
        False,
        "bold yellow",
        "the wall limit was reached while the trainer was still progressing",
    ),
    # a signal stopped the harness; the exit code is INTERRUPTED_BASE + the signal number
    Outcome(
        Kind.INTERRUPTED,
        INTERRUPTED_BASE + 2,
        True,
        False,
        "bold yellow",
        "the harness was stopped by a signal (exit 128 + N)",
    ),
    # compare/bisect/sweep rows whose run could not be prepared (a variant that does not
    # apply to a commit, a missing tool): a row, not a verdict of the trainer
    Outcome(Kind.ERROR, USAGE, True, False, "bold magenta", "the run could not be prepared"),
    # attach: the target was not started by the harness, so its exit status is its parent's
    Outcome(
        Kind.EXITED,
        8,
        False,
        False,
        "bold cyan",
        "harness attach: the process exited while watched (its status is its parent's)",
    ),
    # --expect hazard:KIND[:LOCATION] (docs/hazards.md): the hazard is the failure sought, so
    # a bisect finds the commit that brought it in on a host where it never hangs
    Outcome(
        Kind.HAZARD,
        9,
        True,
        True,
        "bold yellow",
        "the run passed but showed the hazard --expect hazard:KIND[:LOCATION] looks for",
    ),
)

OUTCOMES: dict[Kind, Outcome] = {o.kind: o for o in _ALL}
KINDS = tuple(OUTCOMES)
REPRODUCED = frozenset(o.kind for o in _ALL if o.reproduced)

PASS = OUTCOMES[Kind.PASS].exit_code
CHECK_FAILED = OUTCOMES[Kind.CHECK_FAILED].exit_code
HANG = OUTCOMES[Kind.HANG].exit_code
CRASH = OUTCOMES[Kind.CRASH].exit_code  # crash or error exit of the trainer
BUILD_FAILED = OUTCOMES[Kind.BUILD_FAILED].exit_code
TIMEOUT_PROGRESSING = OUTCOMES[Kind.TIMEOUT_PROGRESSING].exit_code


class CommandExit(IntEnum):
    """The exit codes of a command that does not exit with a run's verdict: each command's
    own set, every code with its meaning (`--help` and README's "Exit codes by command" are
    made from and tested against these). No command says anything but a hang with 2; bad
    input (5), an interrupt (128 + N) and a harness bug (70) are every command's."""

    meaning: str

    def __new__(cls, code: int, meaning: str) -> CommandExit:
        member = int.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        return member


class CompareExit(CommandExit):
    CONFIRMED = 0, "the baseline fails and every fix's failure rate is below it at 95%"
    NOT_CONFIRMED = 1, "no fix confirmed: refuted, unsettled, or the baseline did not fail"


class SweepExit(CommandExit):
    RAN = 0, "every cell ran, whatever it found"
    CELL_FAILED = 1, "a cell could not run (a variant that does not apply, a missing tool)"


class DiffExit(CommandExit):
    """As diff(1)."""

    SAME = 0, "the verdicts are the same (two rates not separated at 95% count as the same)"
    DIFFERENT = 1, "the verdicts differ"


class BisectExit(CommandExit):
    FOUND = 0, "a first bad commit was named (and the fix, when asked, passes on it)"
    NOT_FOUND = (
        1,
        "no single commit named (a range, a budget spent, the failure not reproduced at the "
        "bad end), or the fix failed on it",
    )


class BisectStepExit(CommandExit):
    """The `git bisect run` contract."""

    GOOD = 0, "good: the commit does not show the failure"
    BAD = 1, "bad: the commit shows the failure"
    SKIP = 125, "skip: this commit cannot be tested"
    ABORT = 255, "abort `git bisect run` (bad input, or a harness bug)"


class CheckExit(CommandExit):
    """`check` on a saved report or log."""

    PASSED = 0, "every check passed"
    FAILED = 1, "a check failed, or the run did not finish"


class ProbeExit(CommandExit):
    """`probe`: the env header stepped with random actions."""

    PASSED = 0, "every reward check passed"
    FAILED = 1, "a reward check failed"


class DoctorExit(CommandExit):
    OK = 0, "no probe failed (warnings are facts of the platform)"
    FAILED = 1, "a probe failed"


class PinVerifyExit(CommandExit):
    VERIFIED = 0, "every pinned file matches its hash"
    DRIFT = 1, "a pinned file differs or is missing"
    UNVERIFIED = 10, "no file differs, but some could not be checked (unverified)"


class TriageExit(CommandExit):
    """What the investigation found (docs/triage.md)."""

    FIXED = 0, "a failure was reproduced here and a fix confirmed on its rates"
    NOT_FIXED = 1, "a failure was reproduced here; no fix was confirmed (or none tried)"
    BUILD_FAILED = 4, "the baseline's build failed: Reproduce could not run"
    NOT_REPRODUCED = 7, "no failure was reproduced here (on this host, nor its host profiles)"


# the commands with codes of their own; every other command exits with its run's verdict
COMMAND_EXITS: dict[str, type[CommandExit]] = {
    "compare": CompareExit,
    "sweep": SweepExit,
    "diff": DiffExit,
    "bisect": BisectExit,
    "bisect-step": BisectStepExit,
    "check": CheckExit,
    "probe": ProbeExit,
    "doctor": DoctorExit,
    "pin verify": PinVerifyExit,
    "triage": TriageExit,
}
# every command's besides its own (bisect-step's bad input and bugs abort: 255)
INTERRUPTED_EXIT = ("128+N", "interrupted by signal N")
COMMON_EXITS = (
    (str(USAGE), "bad input or configuration"),
    INTERRUPTED_EXIT,
    (str(INTERNAL_ERROR), "a harness bug (traceback under --report-dir)"),
)


def exit_help(command: str) -> str:
    """One paragraph for a command's --help: its own codes, then every command's."""
    own = [(str(int(c)), c.meaning) for c in COMMAND_EXITS[command]]
    own += [INTERRUPTED_EXIT] if command == "bisect-step" else COMMON_EXITS
    said = "; ".join(f"{code} {meaning}" for code, meaning in own)
    return f"Exit codes of {command}: {said}."


def verdict_help() -> str:
    """One paragraph for the --help of a command that exits with its run's verdict."""
    shown = [o for o in _ALL if o.kind not in (Kind.ERROR, Kind.INTERRUPTED)]
    said = [f"{o.exit_code} {o.kind}" for o in shown]
    return (
        "Exits with the verdict's code: "
        + ", ".join(said)
        + "; "
        + "; ".join(f"{code} {meaning}" for code, meaning in COMMON_EXITS)
        + "."
    )


def get(kind: str) -> Outcome:
    """The registered outcome of `kind`; an unknown kind is a harness bug."""
    try:
        return OUTCOMES[Kind(kind)]
    except ValueError:
        raise ValueError(f"unknown verdict kind {kind!r} (known: {', '.join(KINDS)})") from None


def exit_code(kind: str) -> int:
    return get(kind).exit_code


def is_failure(kind: str) -> bool:
    return get(kind).failure


def reproduces(kind: str) -> bool:
    return kind in REPRODUCED


def style(kind: str) -> str:
    """A kind's display style; statuses that are not kinds (running, failed) are plain bold."""
    try:
        return OUTCOMES[Kind(kind)].style
    except ValueError:
        return "bold"


def interrupted_code(signum: int) -> int:
    return INTERRUPTED_BASE + signum


def kind_of(value: object, what: str = "verdict kind") -> Kind:
    """`value` as a registered kind, or a ValueError that lists the known ones."""
    return vocab.parse(Kind, value, what)
