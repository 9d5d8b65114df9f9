"""The command line: one module per command (its parser and its `command` function), option
groups defined once (`options`), and here the dispatch, the signal handlers and the mapping
of every way a command can end to an exit code (harness.outcome)."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from harness import __version__, outcome
from harness.cli import bisect, build, check, compare, doctor, pin, probe, report, run, sweep, watch
from harness.cli.options import Parser
from harness.errors import HarnessError, Interrupted

DESCRIPTION = (
    """\
Run PufferLib's native trainer (or its embedded replica, or any command) under hang
watchdogs; sample every thread on a suspected hang; say what happened and why it matters:
pass, hang (with its mechanism and location), crash, error exit, failed checks. Compare
variants and bisect upstream history. Every run leaves a report folder.

exit codes:
"""
    + "\n".join(
        f"  {'128+N' if o.kind == 'interrupted' else o.exit_code:<5} {o.kind}: {o.meaning}"
        for o in outcome.OUTCOMES.values()
        if o.kind != "error"
    )
    + f"""
  {outcome.USAGE:<5} usage or configuration error
  {outcome.INTERNAL_ERROR:<5} internal error of the harness (traceback under --report-dir)"""
)

# every command module: add_parser(sub) and command(args) -> exit code
_MODULES = (run, watch, build, compare, sweep, check, report, probe, doctor, pin, bisect)
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


def _install_signal_handlers() -> None:
    """First SIGINT/SIGTERM/SIGHUP raises Interrupted in the main thread (the runner then
    kills the trainer's tree and the partial report is written); later ones are ignored
    so that cleanup is not cut short."""
    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _internal_error(exc: Exception, report_dir: Path) -> int:
    """A bug in the harness: one line on stderr, the traceback in a file."""
    path = report_dir / "harness-internal-error.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(traceback.format_exc())
        where = f" (traceback in {path})"
    except OSError:
        where = ""
    print(f"harness: internal error: {exc!r}{where}", file=sys.stderr)
    return outcome.INTERNAL_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _install_signal_handlers()
    try:
        return COMMANDS[args.command](args)
    except HarnessError as exc:
        print(f"harness: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        print(f"harness: interrupted by signal {exc.signum}", file=sys.stderr)
        return outcome.interrupted_code(exc.signum)
    except BrokenPipeError:  # `harness ... | head`: the reader left; nothing to report
        return outcome.BROKEN_PIPE
    except Exception as exc:
        report_dir = getattr(args, "report_dir", None) or Path("reports")
        return _internal_error(exc, report_dir)
