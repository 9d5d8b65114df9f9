"""Exit codes (the documented contract) and the one exception type the CLI turns into them."""

from __future__ import annotations

PASS = 0
CHECK_FAILED = 1
HANG = 2
CRASH = 3  # crash or error exit of the trainer
BUILD_FAILED = 4
USAGE = 5  # bad input: unknown env/scenario/variant, malformed TOML, missing checkout, drift …
TIMEOUT_PROGRESSING = 6  # wall timeout reached while the trainer was still making progress
BISECT_SKIP = 125  # `git bisect run` contract: this commit cannot be tested
INTERRUPTED_BASE = 128  # harness got a signal: 128 + signal number (130 SIGINT, 143 SIGTERM)


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
