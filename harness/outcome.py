"""The one registry of outcomes: every verdict kind once, with its exit code, whether it is a
failure, whether it reproduces a failure (for compare, bisect and sweep), and how it is shown;
and every other exit code the harness uses. Nothing else in the package spells a kind's exit
code or its flags: they read them here. README's "Exit codes" table is tested against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

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
BISECT_SKIP = 125  # `git bisect run` contract: this commit cannot be tested
INTERRUPTED_BASE = 128  # the harness got signal N: exit 128 + N (130 SIGINT, 143 SIGTERM)
BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of our stdout went away (`harness … | head`)
BISECT_ABORT = 255  # `git bisect run` stops on any exit code >= 128; 255 is "abort"


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

# `harness triage ENV` (docs/triage.md): what the investigation found, for CI; an interrupted
# triage exits 128 + N and bad input 5, as every command
TRIAGE_FIXED = 0  # a failure was reproduced here and a fix was confirmed on its rates
TRIAGE_NOT_FIXED = 1  # a failure was reproduced here; no fix was confirmed (or none tried)
TRIAGE_NOT_REPRODUCED = 7  # no failure was reproduced here (on this host or its profiles)


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
