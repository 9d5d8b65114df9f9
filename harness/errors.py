"""The one exception type the CLI turns into a one-line message and an exit code, and the
interruption the signal handlers raise. Exit codes themselves live in harness.outcome."""

from __future__ import annotations

# TEMP(layout): re-exported while modules still import exit codes from here
from harness.outcome import BISECT_SKIP as BISECT_SKIP
from harness.outcome import BUILD_FAILED as BUILD_FAILED
from harness.outcome import CHECK_FAILED as CHECK_FAILED
from harness.outcome import INTERRUPTED_BASE as INTERRUPTED_BASE
from harness.outcome import USAGE as USAGE


class HarnessError(Exception):
    """A failure the user can act on: printed as one line, mapped to an exit code, no traceback."""

    def __init__(self, message: str, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Interrupted(BaseException):
    """Raised in the main thread when the harness receives SIGINT/SIGTERM/SIGHUP.

    A BaseException so that broad `except Exception` blocks do not swallow it on the way to
    the code that kills the trainer's tree and writes the partial report.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum
