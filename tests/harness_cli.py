"""Run the harness CLI as a real subprocess (its own session) and read its report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class HarnessResult:
    code: int
    stdout: str
    stderr: str
    elapsed: float
    report_dir: Path | None

    @property
    def report(self) -> dict[str, Any]:
        assert self.report_dir is not None, f"no report: {self.stderr}"
        return json.loads((self.report_dir / "report.json").read_text())


def only_report_dir(parent: Path) -> Path | None:
    dirs = [d for d in parent.iterdir() if d.is_dir()] if parent.exists() else []
    return dirs[0] if len(dirs) == 1 else None


def harness(
    *args: str,
    report_root: Path,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    interrupt_after: float | None = None,
    interrupt_signal: int = signal.SIGINT,
) -> HarnessResult:
    full_env = {**os.environ, **(env or {})}
    argv = [sys.executable, "-m", "harness", *args]
    if args and args[0] in ("run", "watch", "compare", "bisect") and "--report-dir" not in args:
        argv[4:4] = ["--report-dir", str(report_root)]
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            proc.send_signal(interrupt_signal)
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return HarnessResult(
        proc.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        time.monotonic() - start,
        only_report_dir(report_root),
    )


def tree_is_gone(pid: int) -> bool:
    """The watched process and everything in its session are gone (no orphan, no zombie)."""
    if psutil.pid_exists(pid):
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
            return False  # a zombie is a leak too
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(p.pid) == pid:
                return False
    return True
