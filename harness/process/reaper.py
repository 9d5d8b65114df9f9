"""The reaper: nothing the trainer starts outlives the harness, not even a SIGKILLed harness.

`proctree.kill_tree` cleans up on every exit path the harness itself runs (a verdict, an
exception, SIGINT/SIGTERM/SIGHUP). It cannot run when the harness is SIGKILLed (an OOM kill,
`kill -9`, a CI step timeout that signals the harness's pid): the trainer, its children and
anything that left its session were then re-parented to init and lived on, holding the GPU.

So `run_watched` starts a small process BEFORE the trainer: `reaper_serve` (how it records
the tree and kills it), its own process in its own session (`start_new_session`), so that a
SIGKILL of the harness's process group does not take it along. This module is the harness's
side of it: `Reaper` (start it, tell it the trainer's pid and cookie, end it with "done" or
"kill"), the cookie, and the trainer's argv through the PR_SET_PDEATHSIG wrapper
(`pdeathsig`). A build runs the same way (`tools.run_tool(..., reaped=True)`: the build
command runs like the trainer, under its own reaper, with PR_SET_PDEATHSIG and the cookie),
and ends through "kill".

Limits (also in docs/architecture.md, "Nothing outlives the harness"):
- a process that left the trainer's session, whose ancestors all died before any scan saw
  it (within one poll interval: `reaper_serve.POLL_S`, up to `IDLE_POLL_S` once the tree has
  not grown for a few scans) AND that dropped the cookie from its environment
  (`env -i`, sudo, a daemon that scrubs it) is not killed, nor what it started;
- a process in uninterruptible sleep (D state) dies only when its I/O ends;
- a SIGKILL of the reaper itself (by pid, or of its own session) ends the protection: the
  trainer still dies by PR_SET_PDEATHSIG when the harness does, its descendants do not;
- a CI runner that kills the whole cgroup kills everything anyway, reaper included.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence

from harness.process import pdeathsig, reaper_serve

READY_TIMEOUT_S = 10.0  # how long the harness waits for the reaper to start
# the trainer's environment carries it (see `new_cookie`); its value is the reaper's, which
# reads it without importing this module
COOKIE_VAR = reaper_serve.COOKIE_VAR


def _python(script: str, *args: str) -> list[str]:
    # -I -S: no site, no user environment, no harness package: a fast, import-light start
    return [sys.executable, "-I", "-S", os.path.abspath(script), *args]


def pdeathsig_argv(argv: Sequence[str], status_fd: int, options: Sequence[str] = ()) -> list[str]:
    """`argv` wrapped so that it runs with PR_SET_PDEATHSIG(SIGKILL) toward this process
    (pass `status_fd`, the write end of a pipe, to the child; see `exec_status`), under the
    host conditions `options` (see `pdeathsig.exec_with_pdeathsig`)."""
    return _python(pdeathsig.__file__, str(os.getpid()), str(status_fd), *options, "--", *argv)


def new_cookie() -> str:
    """A random token for COOKIE_VAR in the trainer's environment (one per run): every
    descendant that keeps its environment carries it, even one whose ancestry is lost."""
    return os.urandom(12).hex()


def exec_status(read_fd: int) -> int | None:
    """Wait until the wrapped command has exec'd (None) or failed to (its errno)."""
    failure = exec_failure(read_fd)
    return None if failure is None else failure[0]


def exec_failure(read_fd: int) -> tuple[int, str] | None:
    """Wait until the wrapped command has exec'd (None) or failed to: (errno, the step that
    failed: "exec", or a condition's key: "cpus", "as", "cgroup")."""
    data = b""
    while chunk := os.read(read_fd, 64):
        data += chunk
    words = data.split()
    return (int(words[0]), words[1].decode() if len(words) > 1 else "exec") if words else None


class Reaper:
    """The harness's handle on its reaper process: `start()`, `watch(pid)`, `release()`.

    If the reaper cannot start or dies, the harness says so once on stderr and runs on
    without it (kill_tree still cleans up every exit path the harness itself survives)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.ctl: int | None = None  # the write end: only the harness holds it
        self.startup_s = 0.0

    @classmethod
    def start(cls) -> Reaper:
        self = cls()
        t0 = time.monotonic()
        read_fd, self.ctl = os.pipe()
        try:
            self.proc = subprocess.Popen(
                _python(reaper_serve.__file__, "serve", str(read_fd), str(os.getpid())),
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                start_new_session=True,  # not in the harness's process group or session
            )
        except OSError as exc:
            self._fail(f"cannot start: {exc}")
            return self
        finally:
            os.close(read_fd)
        assert self.proc.stdout is not None
        try:
            ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
            line = self.proc.stdout.readline() if ready else b""
        except BaseException:  # interrupted: no reaper, and none left behind
            self._close()
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc.stdout.close()
        if line != b"ready\n":
            self._fail("did not start")
        self.startup_s = time.monotonic() - t0
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def watch(self, pid: int, cookie: str = "") -> None:
        """Follow the tree of `pid`, whose environment holds COOKIE_VAR=`cookie` if given."""
        self._send(f"watch {pid} {cookie}\n" if cookie else f"watch {pid}\n")

    def release(self) -> None:
        """The harness cleaned up itself: the reaper exits without killing anything."""
        self._end("done\n")

    def kill(self) -> None:
        """Kill the watched tree now, as on the harness's death (escapees that left its
        session included), and wait until the reaper is done: how a build ends."""
        self._end("kill\n", reaper_serve.KILL_DEADLINE_S + 5)

    def _end(self, line: str, wait_s: float = 5.0) -> None:
        self._send(line)
        self._close()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _send(self, line: str) -> None:
        if self.ctl is None:
            return
        try:
            os.write(self.ctl, line.encode())
        except OSError as exc:
            self._fail(f"is gone ({exc.strerror})")

    def _close(self) -> None:
        if self.ctl is not None:
            os.close(self.ctl)
            self.ctl = None

    def _fail(self, why: str) -> None:
        print(
            f"harness: warning: the reaper {why}; a SIGKILL of the harness may leave "
            "processes behind",
            file=sys.stderr,
        )
        self._close()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def start() -> Reaper:
    return Reaper.start()
