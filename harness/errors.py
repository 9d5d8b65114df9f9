"""The one exception type the CLI turns into a one-line message and an exit code, and the
interruption the signal handlers raise. Exit codes themselves live in harness.outcome."""

from __future__ import annotations

from harness.outcome import USAGE


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

    def left(self) -> str:
        """What the interruption left written, for the command line's one line; a command
        that had written something raises a subclass that says what and where."""
        return "before the run's report folder was made: nothing was written"
