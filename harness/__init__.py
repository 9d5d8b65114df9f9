"""puffer-harness: run PufferLib's native trainer under hang watchdogs and explain what happened."""

import os
import sys

# Ctrl-C at any moment: importing the commands takes most of a second, and Python's own
# handler would raise KeyboardInterrupt inside some import (a traceback, exit 1 or -2).
# Until harness.cli.main() installs the real handlers, a signal ends the process at once:
# nothing has been started or written yet, so there is nothing to clean up. Installed first
# thing in the first module of ours any harness process runs (`harness` and `python -m
# harness` both import this package first), through the built-in `_signal` the interpreter
# loaded at start-up (`import signal` builds its enums: long enough for a Ctrl-C to land in
# it), and only when this process is the harness itself, never when a test or a tool
# imports the package. What is left is the interpreter's own start-up.
EARLY_SIGNALS = (2, 15, 1)  # SIGINT, SIGTERM, SIGHUP: POSIX numbers, `signal` not imported yet


def _early_interrupt(signum: int, _frame: object) -> None:
    message = f"harness: interrupted by signal {signum} while starting: nothing was written\n"
    try:
        os.write(2, message.encode())
    finally:
        os._exit(128 + signum)  # outcome.interrupted_code, not imported yet


def _is_harness_process() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    parts = argv0.replace(os.sep, "/").split("/")
    # `python -m harness` shows as "-m" while the package is imported, then as the path of
    # harness/__main__.py
    orig = sys.orig_argv
    run_as_module = argv0 == "-m" and any(
        orig[i : i + 2] == ["-m", "harness"] for i in range(len(orig) - 1)
    )
    return parts[-1] == "harness" or parts[-2:] == ["harness", "__main__.py"] or run_as_module


if _is_harness_process():
    for _sig in EARLY_SIGNALS:
        sys.modules["_signal"].signal(_sig, _early_interrupt)

# GitPython refuses to import without a git executable; the harness only needs git for git
# pins and bisect, and reports a missing git there, in one line, when it is needed.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

__version__ = "0.1.0"
