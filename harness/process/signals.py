"""Signal numbers as names, and how a process ended, once for the package: the watch loop's
exit events and the verdict of a crash use the same words ("SIGKILL", "killed by SIGKILL")."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass


def signal_name(num: int) -> str:
    """`9` → "SIGKILL"; a number the platform does not name → "signal 64"."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


@dataclass(frozen=True)
class Ending:
    """How a process ended: an exit code, or the signal that killed it; neither when its
    status was not seen (it vanished between two looks and someone else reaped it)."""

    exit_code: int | None = None
    signal: int | None = None
    core_dumped: bool = False

    @property
    def known(self) -> bool:
        return self.exit_code is not None or self.signal is not None

    @property
    def failed(self) -> bool:
        """Killed by a signal, or exited non-zero."""
        return self.signal is not None or bool(self.exit_code)

    def words(self) -> str:
        """ "exited 0", "exited 3", "killed by SIGKILL (core dumped)", "exited, status unknown"."""
        if self.signal is not None:
            dumped = " (core dumped)" if self.core_dumped else ""
            return f"killed by {signal_name(self.signal)}{dumped}"
        if self.exit_code is not None:
            return f"exited {self.exit_code}"
        return "exited, status unknown"


UNKNOWN = Ending()


def from_wait_status(status: int) -> Ending:
    """A wait(2) status (as /proc/PID/stat's exit_code field gives it)."""
    if os.WIFEXITED(status):
        return Ending(exit_code=os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        return Ending(signal=os.WTERMSIG(status), core_dumped=os.WCOREDUMP(status))
    return UNKNOWN


def from_returncode(returncode: int) -> Ending:
    """Popen's returncode: negative is the signal that killed the process."""
    return Ending(signal=-returncode) if returncode < 0 else Ending(exit_code=returncode)
