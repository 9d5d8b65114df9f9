"""Starting the watcher, outside pytest's tree: a launcher (`python -c`) started with
`posix_spawn` (one C call: nothing of `subprocess`, which a test or a conftest may have
patched) in a session of its own starts the watcher and exits at once, so the watcher is
nobody's child in pytest's tree. The launcher's wait is bounded."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

import pytest

import harness
from harness.pytest_plugin import channel
from harness.pytest_plugin.pinned import EXECUTABLE, P

PR_SET_PTRACER = 0x59616D61  # yama: let this pid (and its children) trace us
LAUNCH_S = 10.0  # the launcher only starts the watcher and exits
_LAUNCHER = (
    "import json, subprocess, sys\n"
    "a = json.loads(sys.argv[1])\n"
    "subprocess.Popen(a['cmd'], pass_fds=a['fds'], stdin=subprocess.DEVNULL,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
)


def watcher_env(env: dict[str, str]) -> dict[str, str]:
    """The session's environment (as it was at the start), with this harness importable
    whether it is installed or not."""
    root = str(Path(harness.__file__).resolve().parent.parent)
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    out.pop("HANG_WATCH_RESUME", None)
    return out


def start_watcher(args: list[str], fds: list[int], env: dict[str, str]) -> str | None:
    """Start `python -m harness.pytest_plugin.watcher ARGS` with `fds` passed on; None when
    the launcher ran and exited, else why not."""
    cmd = [EXECUTABLE, "-m", "harness.pytest_plugin.watcher", *args]
    payload = P.dumps({"cmd": cmd, "fds": fds})
    null = os.devnull
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0),
    ]
    for fd in fds:
        P.set_inheritable(fd, True)
    try:
        pid = P.posix_spawn(
            EXECUTABLE,
            [EXECUTABLE, "-c", _LAUNCHER, payload],
            watcher_env(env),
            file_actions=actions,
            setsid=True,
        )
    except OSError as exc:
        return f"the launcher did not start ({exc})"
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                P.set_inheritable(fd, False)
    end = P.monotonic() + LAUNCH_S
    while P.monotonic() < end:
        try:
            done, status = P.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else (a test's SIGCHLD handler)
            return None
        except InterruptedError:
            continue
        if done:
            if os.waitstatus_to_exitcode(status) != 0:
                return f"the launcher failed (status {os.waitstatus_to_exitcode(status)})"
            return None
        P.sleep(0.01)
    try:
        P.kill(pid, signal.SIGKILL)
        P.waitpid(pid, 0)
    except OSError:
        pass
    return f"the launcher did not finish within {LAUNCH_S:g}s"


def check_report_dir(path: Path) -> None:
    """A folder that cannot take a report is refused now, in one line (the harness's own
    check, `report.store.check_report_dir`, costs its imports in every pytest start; the
    watcher runs it again before each report)."""
    try:
        (path / channel.HIDDEN_DIR).mkdir(parents=True, exist_ok=True)
        probe = path / channel.HIDDEN_DIR / f".probe-{os.getpid()}"
        probe.write_bytes(b"probe\n")
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(
            f"--hang-report-dir {path}: cannot hold a report ({exc.strerror or exc})"
        ) from None


def allow_tracer(pid: int) -> None:
    """Under yama ptrace_scope=1 only an ancestor may trace: the watcher is none (it is
    started outside pytest's tree), so allow it and its stack tools. Best effort: without
    yama the call fails and nothing is needed."""
    if pid <= 0:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PTRACER, pid, 0, 0, 0)
