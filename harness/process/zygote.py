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

Started as `python -m harness.process.zygote SOCK_FD PARENT_PID ENTRY PRELOAD...`; the client
is `Zygote` below. `HARNESS_NO_ZYGOTE=1` turns it off (every child is exec'd)."""

from __future__ import annotations

import array
import contextlib
import importlib
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

DISABLE_VAR = "HARNESS_NO_ZYGOTE"
READY = b"ready\n"
MAX_REQUEST = 1 << 20  # argv + environment of one run, as JSON
START_LIMIT_S = 30.0  # importing the harness on a loaded machine
_PR_SET_PDEATHSIG = 1


def _pdeathsig(parent: int) -> bool:
    """PR_SET_PDEATHSIG(SIGKILL) toward the parent; False when the parent is already gone."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


# ---------------------------------------------------------------- the zygote's side


def _child(
    entry: str, request: dict[str, object], fds: list[int], ctl: socket.socket, started: int
) -> None:
    """In the forked child: become the run's process, call the entry, exit with its code.
    `started` is closed once the child leads its own session: only then is its pid handed
    out (a caller may signal its process group at once)."""
    code = 1
    try:
        ctl.close()
        zygote = os.getppid()
        os.setsid()
        if not _pdeathsig(zygote):
            os._exit(137)
        os.close(started)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        # the signal dispositions of a fresh interpreter (the zygote's wakeup fd is not ours)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(env)
        sys.argv = argv
        sys.orig_argv = [sys.executable, "-m", *[str(a) for a in request["module"]], *argv[1:]]  # type: ignore[attr-defined]
        module, _, func = entry.partition(":")
        main = getattr(importlib.import_module(module), func)
        result = main(argv[1:])
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:  # before the entry installed its own handlers
        code = 128 + signal.SIGINT
    except BaseException:  # a bug of the entry's: its traceback, as an exec'd child would
        import traceback

        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


def _recv(ctl: socket.socket) -> tuple[dict[str, object], list[int]] | None:
    """One request: a length-prefixed JSON header and its descriptors; None at EOF."""
    fds = array.array("i")
    msg, ancdata, _, _ = ctl.recvmsg(8, socket.CMSG_SPACE(8 * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(msg) < 8:
        for fd in fds:
            os.close(fd)
        return None
    size = int.from_bytes(msg, "big")
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = ctl.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body), list(fds)


def serve(ctl_fd: int, parent: int, entry: str, preload: Sequence[str]) -> int:
    if not _pdeathsig(parent):
        return 137
    ctl = socket.socket(fileno=ctl_fd)
    for name in preload:
        importlib.import_module(name)
    if threading.active_count() != 1:  # never fork a threaded process: refuse, the client execs
        ctl.sendall(b"threads\n")
        return 1
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    status_of: dict[int, int] = {}  # child pid -> the client's status pipe (write end)
    ctl.sendall(READY)
    while True:
        ready, _, _ = select.select([ctl.fileno(), wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            _reap(status_of)
        if ctl.fileno() in ready:
            got = _recv(ctl)
            if got is None:  # the client is gone or done: the children go with us
                return 0
            request, fds = got
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                ctl.sendall(b"0\n")
                continue
            started_r, started_w = os.pipe2(os.O_CLOEXEC)
            pid = os.fork()
            if pid == 0:
                for fd in [wake_r, wake_w, started_r, *status_of.values()]:
                    os.close(fd)
                _child(entry, request, fds, ctl, started_w)
            os.close(started_w)
            os.read(started_r, 1)  # EOF: the child has its session (or died trying)
            os.close(started_r)
            for fd in fds[:3]:
                os.close(fd)
            status_of[pid] = fds[3]
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(ctl, [f"{pid}\n".encode()], [pidfd])
            finally:
                os.close(pidfd)
            _reap(status_of)  # a child that already ended sent no SIGCHLD we will see again


def _reap(status_of: dict[int, int]) -> None:
    while status_of:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status_of.pop(pid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, f"{status}\n".encode())
            os.close(fd)


# ---------------------------------------------------------------- the client's side


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


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
        weakref.finalize(self, _close, pidfd, status_r)
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
        # the descriptors stay open until this object goes (`_fds`), so none of them ever
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

    @classmethod
    def start(cls, entry: str, preload: Sequence[str], module: Sequence[str]) -> Zygote | None:
        """A ready zygote that calls `entry` ("package.module:function", given the argv
        after the program name) in each child, having imported `preload`; `module` is what
        the child's `sys.orig_argv` shows after `-m`. None when it is turned off or could
        not start: the caller execs its children instead."""
        if os.environ.get(DISABLE_VAR):
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid()), entry]
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

        body = json.dumps({"argv": list(argv), "env": env, "cwd": cwd, "module": self._module})
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        try:
            fds = [stream(stdin, 0), stream(stdout, 1), stream(stderr, 2), status_w]
            header = len(body.encode()).to_bytes(8, "big")
            with self._lock:
                try:
                    socket.send_fds(self._ctl, [header], fds)
                    self._ctl.sendall(body.encode())
                    msg, got, _, _ = socket.recv_fds(self._ctl, 32, 1)
                except OSError:
                    msg, got = b"", []
            pid = int(msg.strip() or b"0")
        finally:
            for fd in [*opened, status_w]:
                os.close(fd)
        if pid <= 0 or not got:
            for fd in [status_r, *got, *mine.values()]:
                os.close(fd)
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


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]))
