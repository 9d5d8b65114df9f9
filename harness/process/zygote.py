"""The zygote: one warm process that has imported the harness once and forks a child per run.

A sweep, a compare, `--repeat` and triage start a child `harness run` (or `watch`) per run.
Exec'ing a fresh interpreter for each costs about half a CPU-second of imports before the
run does anything (pydantic models, rich, the analysis tables), on a machine the runs are
measuring. The zygote pays that once: it is started by the parent harness, imports the
modules it is told to (`preload`), and then, for each run, forks a child that calls the
entry function (`harness.cli:main`) with the run's argv, environment, working directory
and standard streams. The child is exactly what `python -m harness ARGS` would run, minus
the interpreter's start-up: its own session, its own report folder, its own reaper.

Invariants, which the exec path (`reaper.pdeathsig_argv`) also keeps:
- the zygote is single-threaded when it forks (it refuses to start otherwise: a fork of a
  threaded process is the hang class this project diagnoses);
- nothing outlives the parent: the zygote has PR_SET_PDEATHSIG(SIGKILL) toward the parent
  thread that started it and exits when the parent's end of the socket closes; each child
  has PR_SET_PDEATHSIG(SIGKILL) toward the zygote; a killed child harness's own reaper then
  kills its trainer's tree;
- a child is never signalled by a recycled pid: the zygote, its parent, opens a pidfd for
  it before anyone could reap it and hands it over, and the client signals through it;
- the child's exit status reaches the client through a pipe of the client's own: the
  zygote reaps the child and writes its wait status there; EOF without a status means the
  zygote died, and the child with it (SIGKILL).

The zygote itself is harness/process/zygote_server.py; the client is `Zygote` below.
`HARNESS_NO_ZYGOTE=1` turns it off (every child is exec'd)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence

from harness.process import zygote_server
from harness.process.zygote_server import MAX_REQUEST, READY, close_fds

DISABLE_VAR = "HARNESS_NO_ZYGOTE"
START_LIMIT_S = 30.0  # importing the harness on a loaded machine


# ---------------------------------------------------------------- the client's side


class ZygoteChild:
    """A run forked by the zygote, handled like a `subprocess.Popen` (the parts a caller
    of a child harness uses: pid, returncode, poll, wait, communicate, send_signal, kill).
    Its standard output and error, when piped, are `stdout`/`stderr` (binary files)."""

    def __init__(self, pid: int, pidfd: int, status_r: int, out: int | None, err: int | None):
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = pidfd
        self._status_r = status_r
        self._lock = threading.Lock()
        weakref.finalize(self, close_fds, pidfd, status_r)
        self.stdout = os.fdopen(out, "rb", buffering=0) if out is not None else None
        self.stderr = os.fdopen(err, "rb", buffering=0) if err is not None else None
        self._out: dict[int, list[bytes]] = {}
        self._fd_out = out if out is not None else -1
        self._fd_err = err if err is not None else -1

    def poll(self) -> int | None:
        return self.wait(0.0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (negative: the signal that killed it); None when `timeout` (0) has
        passed, `subprocess.TimeoutExpired` for a positive timeout, like Popen."""
        if self.returncode is not None:
            return self.returncode
        # several threads may wait at once (a run's own thread, and a stop from another):
        # the descriptors stay open until this object goes (its finalizer), so none ever
        # selects on a closed or reused descriptor, and one of them reads the status
        ready, _, _ = select.select([self._status_r], [], [], timeout)
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            if not ready:
                if timeout == 0.0:
                    return None
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            data = b""
            while chunk := os.read(self._status_r, 64):
                data += chunk
            # EOF with no status: the zygote died, and this child with it (PR_SET_PDEATHSIG)
            status = int(data) if data.strip() else signal.SIGKILL
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Both pipes read to their end, then the exit waited for; TimeoutExpired at the
        deadline (call again to go on: what was read is kept)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = {
            f.fileno(): f for f in (self.stdout, self.stderr) if f is not None and not f.closed
        }
        open_fds = list(streams)
        while open_fds:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    self._out.setdefault(fd, []).append(chunk)
                else:
                    open_fds.remove(fd)
                    streams[fd].close()
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self.wait(left if left != 0.0 else 0.001) is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)

        out = b"".join(self._out.get(self._fd_out, []))
        err = b"".join(self._out.get(self._fd_err, []))
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The client: starts the zygote (`start`), asks it for children (`spawn`), and ends it
    (`close`, or the parent's death). One zygote serves many threads (a lock per request);
    start it from a thread that outlives its children: the zygote dies with that thread."""

    def __init__(self, proc: subprocess.Popen[bytes], ctl: socket.socket, module: list[str]):
        self._proc = proc
        self._ctl = ctl
        self._module = module
        self._lock = threading.Lock()
        self._broken = False

    @classmethod
    def start(cls, entry: str, preload: Sequence[str], module: Sequence[str]) -> Zygote | None:
        """A ready zygote that calls `entry` ("package.module:function", given the argv
        after the program name) in each child, having imported `preload`; `module` is what
        the child's `sys.orig_argv` shows after `-m`. None when it is turned off or could
        not start: the caller execs its children instead."""
        if os.environ.get(DISABLE_VAR):
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [
            sys.executable,
            "-m",
            zygote_server.__name__,
            str(theirs.fileno()),
            str(os.getpid()),
            entry,
        ]
        try:
            proc = subprocess.Popen(
                [*argv, *preload],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C of the parent's group is the parent's
                pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        zygote = cls(proc, ours, list(module))
        ready, _, _ = select.select([ours], [], [], START_LIMIT_S)
        line = ours.recv(len(READY)) if ready else b""
        if line != READY:
            zygote.close()
            return None
        return zygote

    @property
    def pid(self) -> int:
        return self._proc.pid

    def spawn(
        self,
        argv: Sequence[str],
        env: dict[str, str],
        cwd: str,
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> ZygoteChild | None:
        """A child running `argv` (argv[0] is its program name) in a new session; each
        stream is a descriptor or `subprocess.PIPE` / `subprocess.DEVNULL`. None when the
        zygote is gone: the caller execs instead."""
        opened: list[int] = []
        mine: dict[int, int] = {}

        def stream(spec: int, index: int) -> int:
            if spec == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            elif spec == subprocess.PIPE and index > 0:  # no stdin pipe: runs read none
                r, fd = os.pipe2(os.O_CLOEXEC)
                mine[index] = r
            else:
                return spec
            opened.append(fd)
            return fd

        body = json.dumps(
            {"argv": list(argv), "env": env, "cwd": cwd, "module": self._module}
        ).encode()
        if self._broken or len(body) > MAX_REQUEST:
            return None
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        got: list[int] = []
        pid = 0
        try:
            fds = [stream(stdin, 0), stream(stdout, 1), stream(stderr, 2), status_w]
            with self._lock:
                try:
                    socket.send_fds(self._ctl, [len(body).to_bytes(8, "big")], fds)
                    self._ctl.sendall(body)
                    msg, got, _, _ = socket.recv_fds(self._ctl, 32, 1)
                    pid = int(msg.strip() or b"0")
                except OSError:
                    self._broken = True  # the zygote is gone: every later run is exec'd
                except BaseException:
                    # interrupted between the request and its answer: the socket is out of
                    # step (an answer may still come), so it is closed; the zygote exits
                    # and a run it forked for this request dies with it (PR_SET_PDEATHSIG)
                    self._broken = True
                    with contextlib.suppress(OSError):
                        self._ctl.close()
                    raise
        except BaseException:
            close_fds(status_r, *got, *mine.values())
            raise
        finally:
            close_fds(*opened, status_w)
        if pid <= 0 or not got:
            close_fds(status_r, *got, *mine.values())
            return None
        return ZygoteChild(pid, got[0], status_r, mine.get(1), mine.get(2))

    def close(self) -> None:
        """End the zygote (its running children die with it: close after they ended)."""
        with contextlib.suppress(OSError):
            self._ctl.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
