"""Every external tool the harness calls (compilers, git, gdb, eu-stack, py-spy, build
scripts) runs through `run_tool`: its own session, a hard timeout, its whole process group
killed on timeout or on the harness's own interruption. A child that must keep running while
something else happens (a process for a tool to attach to) is `started` instead: its own
session too, and killed and reaped however its `with` block ends. Also where tools are found."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil

from harness.process import reaper
from harness.process.proctree import kill_tree
from harness.vocab import StackToolName

# what ptrace-based tools (gdb, eu-stack, py-spy) print when the kernel refuses to attach
PERMISSION_DENIED_MARKERS = ("operation not permitted", "permission denied", "eperm")


def permission_denied(output: str) -> bool:
    low = output.lower()
    return any(m in low for m in PERMISSION_DENIED_MARKERS)


def find_tool(name: str, path: str | None = None) -> str | None:
    """shutil.which on `path` (default: the current PATH); py-spy also next to this
    interpreter: it is a pip dependency, so it sits in the venv's bin, which is not on PATH
    when the harness is run as `.venv/bin/harness`."""
    found = shutil.which(name, path=path)
    if found is None and name == StackToolName.PY_SPY:
        candidate = Path(sys.executable).parent / name
        found = str(candidate) if os.access(candidate, os.X_OK) else None
    return found


@dataclass
class ToolResult:
    argv: list[str]
    returncode: int | None  # None when it timed out or could not start
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    error: str = ""  # why it could not start

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_tool(
    argv: Sequence[str],
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdout_path: Path | None = None,
    reaped: bool = False,
) -> ToolResult:
    """Run an external tool with a hard timeout; on timeout its whole session is killed.

    With `stdout_path`, stdout and stderr go to that file (build logs) instead of memory.
    With `reaped` (the build), the tool runs like the trainer: under its own reaper process,
    with PR_SET_PDEATHSIG and the reaper's cookie in its environment, so that its whole tree
    (compilers that called setsid or double-forked included) dies even when the harness is
    SIGKILLed; on timeout, on interruption and at its end that tree is killed through the
    reaper too. It costs a reaper start (about 30 ms): not for quick tool calls.
    """
    start = time.monotonic()
    out_file = open(stdout_path, "wb") if stdout_path else None  # noqa: SIM115
    guard: reaper.Reaper | None = None
    try:
        guard = reaper.start() if reaped else None
        proc = _launch(argv, cwd, env, out_file, guard)
    except OSError as exc:
        if out_file:
            out_file.close()
        if guard is not None:
            guard.release()
        return ToolResult(list(argv), None, error=str(exc), duration_s=time.monotonic() - start)
    except BaseException:
        if out_file:
            out_file.close()
        raise
    timed_out = False
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.1))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill(proc, guard)
        timed_out, code, out, err = True, None, b"", b""
        # a grandchild stuck in D state may hold the pipes open: do not wait on it forever
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, err = proc.communicate(timeout=5)
    except BaseException:
        _kill(proc, guard)
        raise
    finally:
        if out_file:
            out_file.close()
    # whatever the tool left running in its session (`cmd &` in a build script) goes too,
    # and through the reaper what left the session (`setsid cmd &`, a daemon's double fork)
    kill_leftovers(proc.pid)
    if guard is not None:
        guard.kill()
    return ToolResult(
        list(argv),
        code,
        (out or b"").decode("utf-8", "replace"),
        (err or b"").decode("utf-8", "replace"),
        time.monotonic() - start,
        timed_out,
    )


def _launch(
    argv: Sequence[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    out_file: BinaryIO | None,
    guard: reaper.Reaper | None,
) -> subprocess.Popen[bytes]:
    """Start the tool in its own session; with `guard`, through the PR_SET_PDEATHSIG wrapper,
    with the cookie, and watched by `guard` before it can fork (as the runner starts the
    trainer). Raises OSError when it cannot start."""
    if guard is None:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out_file or subprocess.PIPE,
            stderr=subprocess.STDOUT if out_file else subprocess.PIPE,
            start_new_session=True,
        )
    cookie = reaper.new_cookie()
    status_r, status_w = os.pipe()  # the wrapper's exec errno, or EOF once it exec'd
    try:
        try:
            proc = subprocess.Popen(
                reaper.pdeathsig_argv(argv, status_w),
                cwd=cwd,
                env={**(os.environ if env is None else env), reaper.COOKIE_VAR: cookie},
                stdin=subprocess.DEVNULL,
                stdout=out_file or subprocess.PIPE,
                stderr=subprocess.STDOUT if out_file else subprocess.PIPE,
                start_new_session=True,
                pass_fds=(status_w,),
            )
        finally:
            os.close(status_w)
        guard.watch(proc.pid, cookie)
        try:
            errno_ = reaper.exec_status(status_r)
        except BaseException:  # interrupted while the wrapper starts: kill it, then raise
            _kill(proc, guard)
            raise
    except BaseException:
        guard.release()
        raise
    finally:
        os.close(status_r)
    if errno_ is not None:
        proc.communicate()
        raise OSError(errno_, f"{os.strerror(errno_)}: {argv[0]!r}")
    return proc


def _kill(proc: subprocess.Popen[bytes], guard: reaper.Reaper | None) -> None:
    """Kill the tool's tree and reap it: through its reaper first when it has one (it
    freezes the tree, then kills it, escapees included), then its session and descendants."""
    if guard is not None:
        guard.kill()
    kill_tree(proc, proc.pid)


def _session_of(pid: int) -> int | None:
    """The session id of `pid`, zombies included (their /proc/PID/stat stays readable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[3])
    except (OSError, ValueError, IndexError):
        return None


def kill_leftovers(sid: int, wait_s: float = 0.5) -> None:
    """SIGKILL what is left of a finished tool's session, and reap what of it was re-parented
    to us: once the tool itself has exited, its session's orphans are adopted by this
    process when it is a subreaper (proctree.become_subreaper: the harness, a test worker
    that ran it in-process), and would stay zombies forever (a gdb helper, `cmd &`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            ours = [c.pid for c in psutil.Process().children() if _session_of(c.pid) == sid]
        except psutil.Error:
            return
        for pid in ours:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not ours or time.monotonic() > deadline:
            return
        time.sleep(0.01)


@dataclass
class Started:
    """A child `started` keeps running for the length of a `with` block."""

    proc: subprocess.Popen[bytes]
    ready: bool  # it printed the ready text in time (True when none was asked for)
    output: bytes = b""  # what it printed before that (with a ready text)

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextlib.contextmanager
def started(
    argv: Sequence[str],
    *,
    ready: str = "",
    ready_s: float = 5.0,
    limit_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Started]:
    """A long-running child (a process for a tool to attach to) in its own session, for the
    length of a `with` block: `run_tool`'s counterpart for a child that must keep running
    while something else happens. With `ready`, wait (at most `ready_s`) until its stdout
    holds that text. Its whole session is SIGKILLed and it is reaped however the block ends,
    and at `limit_s` at the latest (a timer, so a block that hangs cannot keep it alive)."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if ready else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    timer = None
    if limit_s is not None:
        timer = threading.Timer(limit_s, _kill_session, (proc,))
        timer.daemon = True
        timer.start()
    try:
        seen = _wait_for(proc, ready, ready_s) if ready else b""
        yield Started(proc, not ready or ready.encode() in seen, seen)
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()  # not mid-kill while the child is reaped below
        kill_tree(proc, proc.pid)
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_for(proc: subprocess.Popen[bytes], text: str, timeout: float) -> bytes:
    """What the child printed until `text` appeared, it closed stdout, or `timeout`."""
    assert proc.stdout is not None
    fd, want, seen = proc.stdout.fileno(), text.encode(), b""
    deadline = time.monotonic() + timeout
    while want not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        seen += chunk
    return seen


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    # a reaped child's pid may be another process's by now: only signal an unreaped one
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
