"""Every external tool the harness calls (compilers, git, gdb, eu-stack, py-spy, build
scripts) runs through `run_tool`: its own session, a hard timeout, its whole process group
killed on timeout or on the harness's own interruption. Also where tools are found."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.process.proctree import kill_tree

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
    if found is None and name == "py-spy":
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
) -> ToolResult:
    """Run an external tool with a hard timeout; on timeout its whole session is killed.

    With `stdout_path`, stdout and stderr go to that file (build logs) instead of memory.
    """
    start = time.monotonic()
    out_file = open(stdout_path, "wb") if stdout_path else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out_file or subprocess.PIPE,
            stderr=subprocess.STDOUT if out_file else subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        if out_file:
            out_file.close()
        return ToolResult(list(argv), None, error=str(exc), duration_s=time.monotonic() - start)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.1))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        kill_tree(proc, proc.pid)
        timed_out, code, out, err = True, None, b"", b""
        # a grandchild stuck in D state may hold the pipes open: do not wait on it forever
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, err = proc.communicate(timeout=5)
    except BaseException:
        kill_tree(proc, proc.pid)
        raise
    finally:
        if out_file:
            out_file.close()
    # whatever the tool left running in its session (`cmd &` in a build script) goes too
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return ToolResult(
        list(argv),
        code,
        (out or b"").decode("utf-8", "replace"),
        (err or b"").decode("utf-8", "replace"),
        time.monotonic() - start,
        timed_out,
    )
