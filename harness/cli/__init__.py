"""The command line: one module per command (its parser and its `command` function), option
groups defined once (`options`), and here the dispatch, the signal handlers and the mapping
of every way a command can end to an exit code (harness.outcome)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from harness import EARLY_SIGNALS, __version__, outcome
from harness.cli import (
    attach,
    bisect,
    build,
    check,
    collect,
    compare,
    diff,
    doctor,
    matrix,
    pin,
    probe,
    report,
    run,
    sweep,
    triage,
    watch,
)
from harness.cli.options import Parser
from harness.errors import HarnessError, Interrupted
from harness.filenames import INTERNAL_ERROR_TXT
from harness.files import atomic_write
from harness.outcome import Kind
from harness.text import terminal_safe

DESCRIPTION = (
    """\
Run PufferLib's native trainer (or its embedded replica, or any command) under hang
watchdogs; sample every thread on a suspected hang; say what happened and why it matters:
pass, hang (with its mechanism and location), crash, error exit, failed checks. Compare
variants and bisect upstream history. Every run leaves a report folder.

exit codes:
"""
    + "\n".join(
        f"  {'128+N' if o.kind == Kind.INTERRUPTED else o.exit_code:<5} {o.kind}: {o.meaning}"
        for o in outcome.OUTCOMES.values()
        if o.kind != Kind.ERROR
    )
    + "\n"
    # the interrupt is a kind above; bad input and a harness bug are every command's
    + "\n".join(
        f"  {code:<5} {meaning}"
        for code, meaning in outcome.COMMON_EXITS
        if (code, meaning) != outcome.INTERRUPTED_EXIT
    )
)

REDELIVER_WAIT_S = 5.0  # for the hook that saw an Interrupted dropped to return

# every command module: add_parser(sub) and command(args) -> exit code
_MODULES = (
    run,
    watch,
    attach,
    build,
    compare,
    sweep,
    matrix,
    collect,
    check,
    report,
    diff,
    probe,
    doctor,
    pin,
    bisect,
    triage,
)
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}
for _module in _MODULES:
    for _name in getattr(_module, "NAMES", None) or (_module.NAME,):
        COMMANDS[_name] = _module.command


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="harness",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=Parser, metavar="COMMAND"
    )
    for module in _MODULES:
        module.add_parser(sub)
    return parser


def _install_signal_handlers() -> Callable[[], None]:
    """First SIGINT/SIGTERM/SIGHUP raises Interrupted in the main thread (the runner then
    kills the trainer's tree and the partial report is written); later ones are ignored
    so that cleanup is not cut short. Returns the undo of the hook below (for main's end).

    A handler's exception is raised at whatever bytecode runs next, and CPython drops some
    of those: raised in importlib's module-lock callback (run at the end of every import,
    and the harness imports lazily while it runs), a `__del__` or a weakref callback, it is
    "unraisable": printed as "Exception ignored in ..." and the program goes on, as if never
    interrupted (it ran on to its verdict: exit 2). Such a lost Interrupted goes through
    sys.unraisablehook: it is raised again, at the next bytecode outside that callback."""
    fired: list[int] = []
    lost: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if lost:  # the first signal again: its Interrupted was dropped by CPython
            raise Interrupted(lost.pop())
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    previous = sys.unraisablehook
    main_thread = threading.get_ident()

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        exc = info.exc_value
        if not (isinstance(exc, Interrupted) and fired):
            previous(info)
            return
        if lost:  # its second delivery is on its way already
            return
        lost.append(exc.signum)
        left = [False]
        threading.Thread(
            target=_deliver_again,
            args=(main_thread, exc.signum, left),
            name="harness-interrupt-again",
            daemon=True,
        ).start()
        # last, and no call: a signal that arrived while this hook runs would be raised in
        # it at the next call, and dropped again ("Exception ignored in sys.unraisablehook")
        left[0] = True

    for sig in EARLY_SIGNALS:
        signal.signal(sig, handler)
    sys.unraisablehook = unraisable
    # A write past RLIMIT_FSIZE (a file size limit: a full disk's stand-in, or a CI quota)
    # sends SIGXFSZ, whose default action kills the process: ignored, the write fails with
    # EFBIG instead and is a note in the report, like ENOSPC (report.store.finish). CPython
    # already ignores it at start-up; said here so that no other entry point depends on it.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def undo() -> None:
        if sys.unraisablehook is unraisable:
            sys.unraisablehook = previous

    return undo


def _deliver_again(main_thread: int, signum: int, left: list[bool]) -> None:
    """The signal again, to the main thread, once the hook that saw its Interrupted dropped
    has returned (bounded: a hook runs microseconds)."""
    deadline = time.monotonic() + REDELIVER_WAIT_S
    while not left[0] and time.monotonic() < deadline:
        time.sleep(0.001)
    with contextlib.suppress(OSError, ValueError):
        signal.pthread_kill(main_thread, signum)


def _interruption_in(exc: BaseException) -> Interrupted | None:
    """The Interrupted that `exc` was made from, if any: CPython wraps an exception raised
    in a descriptor's `__set_name__` (a class being created: an import) in a RuntimeError."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, Interrupted):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _interrupted(exc: Interrupted) -> int:
    """One line: where the interruption left the report (none before the run's folder)."""
    line = f"harness: interrupted by signal {exc.signum} {exc.left()}"
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)
    return outcome.interrupted_code(exc.signum)


def _internal_error(exc: Exception, report_dir: Path) -> int:
    """A bug in the harness: one line on stderr, the traceback in a file. Neither a full
    disk nor an unusable report folder stops the line or the exit code."""
    path = report_dir / INTERNAL_ERROR_TXT
    try:
        atomic_write(path, traceback.format_exc())  # whole or not at all, never empty
        where = f" (traceback in {path})"
    except Exception as write_exc:
        where = f" (no traceback file: {path}: {write_exc})"
    with contextlib.suppress(OSError):
        print(f"harness: internal error: {exc!r}{where}", file=sys.stderr)
    return outcome.INTERNAL_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    undo = _install_signal_handlers()  # first: a signal from here on ends in 128+N, no traceback
    try:
        return _main(argv)
    finally:
        undo()


def _main(argv: Sequence[str] | None) -> int:
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except HarnessError as exc:
        print(f"harness: error: {terminal_safe(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        return _interrupted(exc)
    except KeyboardInterrupt:  # a SIGINT handler of ours was replaced (a library did)
        return _interrupted(Interrupted(int(signal.SIGINT)))
    except BrokenPipeError:  # `harness ... | head`: the reader left; nothing to report
        return outcome.BROKEN_PIPE
    except Exception as exc:
        interrupted = _interruption_in(exc)
        if interrupted is not None:  # wrapped by CPython on its way here: still Ctrl-C
            return _interrupted(interrupted)
        report_dir = getattr(args, "report_dir", None) or Path("reports")
        return _internal_error(exc, report_dir)
