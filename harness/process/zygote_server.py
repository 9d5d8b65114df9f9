"""The zygote's own side (see harness/process/zygote.py for what it is and its invariants):
`python -m harness.process.zygote_server SOCK_FD PARENT_PID ENTRY PRELOAD...` imports the
preload, then forks a child per request and reports each child's end. Standard library only,
like the reaper: nothing of the harness is imported but what it is told to preload."""

from __future__ import annotations

import array
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Sequence

READY = b"ready\n"
MAX_REQUEST = 1 << 20  # argv + environment of one run, as JSON
_PR_SET_PDEATHSIG = 1


def close_fds(*fds: int) -> None:
    """Each descriptor closed, whichever are already gone."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _pdeathsig(parent: int) -> bool:
    """PR_SET_PDEATHSIG(SIGKILL) toward the parent; False when the parent is already gone."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent


def _child(
    entry: str,
    request: dict[str, object],
    fds: list[int],
    ctl: socket.socket,
    started: int,
    zygote: int,
) -> None:
    """In the forked child: become the run's process, call the entry, exit with its code.
    `started` is closed once the child leads its own session: only then is its pid handed
    out (a caller may signal its process group at once)."""
    code = 1
    try:
        ctl.close()
        os.setsid()
        if not _pdeathsig(zygote):
            os._exit(137)
        os.close(started)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        # the signal dispositions of a fresh interpreter
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
    body = b""
    left = size
    while left > 0:  # read whole even when refused: the next request starts after it
        chunk = ctl.recv(min(left, 65536))
        if not chunk:
            return None
        left -= len(chunk)
        if size <= MAX_REQUEST:
            body += chunk
    try:
        request = json.loads(body) if size <= MAX_REQUEST else None
    except ValueError:
        request = None
    if not isinstance(request, dict):  # refused: no descriptors means "0" to the client
        for fd in fds:
            os.close(fd)
        return {}, []
    return request, list(fds)


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
            _serve_one(entry, request, fds, ctl, status_of, (wake_r, wake_w))
            _reap(status_of)  # a child that already ended sent no SIGCHLD we will see again


def _serve_one(
    entry: str,
    request: dict[str, object],
    fds: list[int],
    ctl: socket.socket,
    status_of: dict[int, int],
    own: tuple[int, int],
) -> None:
    """Fork one run and hand its pid and pidfd over; a failure here (a fork refused by a
    process limit, no descriptor left) refuses this run alone ("0": the client execs it),
    never ends the zygote and the runs it is serving."""
    if len(fds) != 4:
        close_fds(*fds)
        ctl.sendall(b"0\n")
        return
    started: tuple[int, int] | None = None
    me = os.getpid()  # read before the fork: the child's getppid() is init once we are gone
    try:
        started = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
    except OSError:
        close_fds(*fds, *(started or ()))
        ctl.sendall(b"0\n")
        return
    if pid == 0:
        signal.set_wakeup_fd(-1)  # before its descriptor is closed: no write to a closed fd
        close_fds(*own, started[0], *status_of.values())
        _child(entry, request, fds, ctl, started[1], me)
    os.close(started[1])
    os.read(started[0], 1)  # EOF: the child has its session (or died trying)
    os.close(started[0])
    close_fds(*fds[:3])
    status_of[pid] = fds[3]
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # it cannot be handed over safely: it goes (not reaped yet: its pid)
        os.kill(pid, signal.SIGKILL)
        ctl.sendall(b"0\n")
        return
    try:
        socket.send_fds(ctl, [f"{pid}\n".encode()], [pidfd])
    finally:
        os.close(pidfd)


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


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]))
