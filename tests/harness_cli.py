"""Run the harness CLI as a real subprocess (its own session) and read its report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.analysis.classify import Verdict
from harness.pipeline.children import ZYGOTE_ENTRY, ZYGOTE_PRELOAD
from harness.process.zygote import Zygote
from harness.report.load import load_report
from harness.report.model import Report
from harness.sampling.model import SampleSet

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = str(ROOT / "harness" / "__main__.py")  # sys.argv[0] of `python -m harness`

# One zygote per test process (harness/process/zygote.py), started by the first `harness()`
# in the test thread (the main thread: the zygote dies with it): each run is forked from it,
# the real CLI in a real process of its own session, without a new interpreter's start-up
# and imports (half a CPU-second, times the suite's hundreds of runs). The interpreter's own
# start-up is tested where it matters by tests that exec `python -m harness` themselves
# (tests/test_interrupt.py, Ctrl-C while Python starts); HARNESS_NO_ZYGOTE=1 execs every run.
_zygote: list[Zygote | None] = []


def zygote() -> Zygote | None:
    if not _zygote:
        _zygote.append(Zygote.start(ZYGOTE_ENTRY, ZYGOTE_PRELOAD, ["harness"]))
    return _zygote[0]


def living_descendants() -> list[psutil.Process]:
    """This test process's living descendants, for "nothing left behind" checks: all but
    the session's zygote, which serves every test (its forked runs do count)."""
    z = _zygote[0] if _zygote else None
    skip = {z.pid} if z is not None else set()
    return [
        p for p in psutil.Process().children(recursive=True) if p.is_running() and p.pid not in skip
    ]


@dataclass
class HarnessResult:
    code: int
    stdout: str
    stderr: str
    elapsed: float
    report_dir: Path | None

    @property
    def folder(self) -> Path:
        """The run's report folder (the one folder under report_root); fails without one."""
        assert self.report_dir is not None, f"no report: {self.stderr}"
        return self.report_dir

    @property
    def report(self) -> dict[str, Any]:
        """report.json as written: for tests of its keys and schema."""
        data: dict[str, Any] = json.loads((self.folder / "report.json").read_text())
        return data

    @property
    def loaded(self) -> Report:
        """The report read back typed, as `harness report` reads it (harness.report.load)."""
        return load_report(self.folder)


def verdict_of(report: Report) -> Verdict:
    """The report's verdict; fails when the run ended without one."""
    assert report.verdict is not None, f"no verdict ({report.status}, {report.stage})"
    return report.verdict


def samples_of(report: Report) -> SampleSet:
    """The report's samples; fails when the run recorded none."""
    assert report.samples is not None, f"no samples ({report.kind})"
    return report.samples


def exit_pid(report: Report) -> int:
    """The watched command's pid; fails when not recorded."""
    assert report.exit is not None and report.exit.pid is not None, report.exit
    return report.exit.pid


def run_s(report: Report) -> float:
    """Seconds from the command's launch to its verdict; fails when not recorded."""
    assert report.timings.run_s is not None, report.timings
    return report.timings.run_s


def only_report_dir(parent: Path) -> Path | None:
    dirs = [d for d in parent.iterdir() if d.is_dir()] if parent.exists() else []
    return dirs[0] if len(dirs) == 1 else None


def trainer_of(harness_pid: int, report_root: Path) -> psutil.Process | None:
    """The command a running harness watches, once it runs: its report.json says status
    `running` at stage `run` (the command is recorded just before the launch), and a
    process of the harness's tree has exec'd that command (the report records no pid)."""
    folder = only_report_dir(report_root)
    if folder is None:
        return None
    try:
        data = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):  # not written yet (writes are atomic: never half a file)
        return None
    argv = (data.get("command") or {}).get("argv")
    if (data.get("status"), data.get("stage")) != ("running", "run") or not argv:
        return None
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(harness_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if p.cmdline() == argv and p.status() != psutil.STATUS_ZOMBIE:
                    return p
    return None


def wait_for_trainer(
    proc: subprocess.Popen[bytes],
    report_root: Path,
    timeout: float,
    ready: Callable[[psutil.Process], bool] | None = None,
) -> psutil.Process:
    """The running trainer of the harness `proc`, once `ready(trainer)` says so, if given
    (e.g. it has forked its worker); fails when the harness exits first or at the deadline."""
    deadline = time.monotonic() + timeout

    def found_ready() -> psutil.Process | None:
        found = trainer_of(proc.pid, report_root)
        with contextlib.suppress(psutil.Error):
            if found is not None and (ready is None or ready(found)):
                return found
        return None

    while (found := found_ready()) is None:
        if proc.poll() is not None:
            raise AssertionError(f"the harness exited {proc.returncode} before its run started")
        if time.monotonic() > deadline:
            raise AssertionError(f"the harness's run did not start within {timeout:g}s")
        time.sleep(0.05)
    return found


def communicate_and_kill(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """The output of `proc` (started in its own session) to its end; whatever happens, its
    whole session is killed and the process reaped afterwards."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return out, err


def harness(
    *args: str,
    report_root: Path,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    interrupt: int | None = None,
    interrupt_when: Callable[[psutil.Process], bool] | None = None,
) -> HarnessResult:
    """`harness ARGS` to its end; with `interrupt` (a signal), that signal is sent to the
    harness once its run has started (report.json at stage `run`, the trainer running) and
    `interrupt_when(trainer)` holds, if given."""
    full_env = {**os.environ, **(env or {})}
    argv = [sys.executable, "-m", "harness", *args]
    if args and args[0] in ("run", "watch", "compare", "bisect") and "--report-dir" not in args:
        argv[4:4] = ["--report-dir", str(report_root)]
    start = time.monotonic()
    z = zygote()
    forked = (
        z.spawn(
            [PROGRAM, *argv[3:]],
            full_env,
            str(ROOT),
            subprocess.DEVNULL,
            subprocess.PIPE,
            subprocess.PIPE,
        )
        if z is not None
        else None
    )
    proc: Any = forked or in_session(argv, full_env)
    before = None
    if interrupt is not None:
        sig = interrupt

        def before() -> None:
            wait_for_trainer(proc, report_root, timeout, interrupt_when)
            proc.send_signal(sig)

    return result_of(proc, start, report_root, timeout, before)


def in_session(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """`argv` started in the repository, in a session of its own (so that its whole tree can
    be killed), stdin closed, stdout and stderr piped; `env` is its whole environment."""
    return subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def run_replica(report_root: Path, env: dict[str, str], *args: str, **kw: Any) -> HarnessResult:
    """`harness run breakout ARGS` (the default pin: the replica) under `env` (a build cache)."""
    return harness("run", "breakout", *args, report_root=report_root, env=env, **kw)


def result_of(
    proc: Any,
    start: float,
    report_root: Path,
    timeout: float,
    before: Callable[[], None] | None = None,
) -> HarnessResult:
    """A harness started in its own session, to its end (`before()` first, while it runs):
    its code, output and report folder; whatever happens, its session is killed and the
    process reaped."""
    try:
        if before is not None:
            before()
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


def watch_opts(
    *,
    startup: int | None = None,
    stall: int | None = None,
    quiescent: int | None = None,
    timeout: int | None = None,
    quiet: bool = False,
) -> tuple[str, ...]:
    """The watchdog's windows as `harness watch`/`run` options, in seconds (`--startup`,
    `--stall`, `--quiescent`, `--timeout`), each one given, and `--quiet`. Each module
    keeps its own values (tuned for a loaded 2-core machine)."""
    windows = {"startup": startup, "stall": stall, "quiescent": quiescent, "timeout": timeout}
    opts = [w for name, v in windows.items() if v is not None for w in (f"--{name}", str(v))]
    return (*opts, "--quiet") if quiet else tuple(opts)


def watch_cmd(
    report_root: Path,
    *cmd: str,
    opts: Sequence[str] = (),
    env: dict[str, str] | None = None,
    interrupt: int | None = None,
    timeout: float = 120,
) -> HarnessResult:
    """`harness watch OPTS -- CMD` to its end, its report folder under `report_root`."""
    return harness(
        "watch",
        *opts,
        "--",
        *cmd,
        report_root=report_root,
        timeout=timeout,
        env=env,
        interrupt=interrupt,
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
