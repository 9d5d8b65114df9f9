"""The noisy neighbour (`--load K`): K busy processes of the harness's own, pinned to the
trainer's CPUs, started before it and stopped after it (docs/hosts.md).

They are processes, not threads of the harness: a busy Python thread would hold the GIL the
harness's own watch loop needs, and a process can be pinned and killed on its own. Each is
started through the reaper's exec wrapper, so PR_SET_PDEATHSIG kills it the moment the
harness dies (a SIGKILL included), and in a session of its own: it is not in the trainer's
tree, which the quiescence rule and the sampler watch, and the trainer's reaper never sees
it. `stop()` kills and reaps every one on every other path."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.errors import HarnessError
from harness.execute.conditions import show_cpus
from harness.process import reaper

LOAD_VAR = "HARNESS_NOISY_NEIGHBOUR"  # in each busy process's environment: the harness pid
_BUSY = "while True: pass"


@dataclass
class NoisyNeighbour:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    line: str = ""  # how it was applied, for the report

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @classmethod
    def start(cls, count: int, cpus: Sequence[int] | None) -> NoisyNeighbour:
        """`count` busy processes on `cpus` (None: wherever the harness may run, as the
        trainer will). On failure, those already started are stopped before raising."""
        self = cls()
        if count <= 0:
            return self
        options = [] if cpus is None else [f"cpus={show_cpus(tuple(cpus))}"]
        try:
            for _ in range(count):
                self.procs.append(_spawn(options))
        except BaseException:
            self.stop()
            raise
        where = "the harness's CPUs" if cpus is None else f"cpus {show_cpus(tuple(cpus))}"
        self.line = (
            f"load {count} (busy processes pinned to {where}, outside the trainer's tree; "
            f"pids {', '.join(map(str, self.pids))})"
        )
        return self

    def stop(self) -> None:
        """Kill and reap every busy process (idempotent)."""
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs = []

    def __enter__(self) -> NoisyNeighbour:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _spawn(options: list[str]) -> subprocess.Popen[bytes]:
    status_r, status_w = os.pipe()
    try:
        try:
            proc = subprocess.Popen(
                reaper.pdeathsig_argv([sys.executable, "-I", "-S", "-c", _BUSY], status_w, options),
                env={LOAD_VAR: str(os.getpid())},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not the trainer's session, nor the harness's
                pass_fds=(status_w,),
            )
        finally:
            os.close(status_w)
        try:
            failure = reaper.exec_failure(status_r)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    finally:
        os.close(status_r)
    if failure is not None:
        proc.wait()
        errno_, what = failure
        raise HarnessError(f"cannot start the noisy neighbour ({what}): {os.strerror(errno_)}")
    return proc
