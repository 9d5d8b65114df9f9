"""Runs made by a child harness: a sweep's cells, a compare's variants, the runs of
`--repeat`. Each is a normal `harness run` (or `watch`) in its own process and session, with
its own report folder and a hard limit, so one run can never leave anything to the next and
parallel runs never mix up their reports; its row is read back from the report it wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from harness.outcome import Kind
from harness.process import proctree, reaper
from harness.process.zygote import Zygote, ZygoteChild
from harness.report.runs import RunRow, load_row

MARGIN_S = 120.0  # startup, sampling and report writing on top of a run's wall limit
CHILD_ENV_DROP = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")
STOP_GRACE_S = 10.0  # a stopped child harness writes its partial report in this time
# what a child `harness run`/`watch` imports, once, in the zygote (harness/process/zygote.py);
# the ELF reader is imported lazily by the sampler, so it is named here too
ZYGOTE_ENTRY = "harness.cli:main"
ZYGOTE_PRELOAD = (
    "harness.cli",
    "harness.pipeline.run",
    "elftools.elf.elffile",
    "elftools.elf.dynamic",
    "elftools.elf.hash",
)
HARNESS_HEAD = 3  # [python, "-m", "harness"]: what the zygote's child does not exec
Child = subprocess.Popen[bytes] | ZygoteChild


class ChildRuns:
    """The child harness processes now running, each in its own session.

    Started with Popen here, not process/tools.run_tool: run_tool waits for its child in the
    calling thread and offers no handle, while a sweep must stop running children from
    another thread (an interrupt, or a run's own limit) the way a user would: SIGTERM first,
    so the child harness kills its trainer and writes its partial report, then the whole
    session is killed and reaped (proctree.kill_tree). Every path ends in `stop` or in a
    normal exit of the child: its limit (`stop`), an exception in the waiting thread
    (`stop`, then re-raised), the parent interrupted (`stop_all`, and nothing new starts).

    Used as a context manager, the children are forked by a zygote that has imported the
    harness once (harness/process/zygote.py), started by the thread that enters: it saves
    each run the interpreter's start-up and imports (half a CPU-second). Without it (or with
    HARNESS_NO_ZYGOTE=1, or when the zygote cannot start) each child is exec'd."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[Child] = set()
        self.stopping = False
        self.zygote: Zygote | None = None

    def __enter__(self) -> ChildRuns:
        self.zygote = Zygote.start(ZYGOTE_ENTRY, ZYGOTE_PRELOAD, ["harness"])
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_all()
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None

    def _fork(self, argv: list[str], env: dict[str, str]) -> ZygoteChild | None:
        """The child from the zygote: argv without the interpreter, as `python -m harness`
        shows it (sys.argv[0] is the package's __main__.py)."""
        if self.zygote is None or argv[1:HARNESS_HEAD] != ["-m", "harness"]:
            return None
        program = str(Path(__file__).resolve().parent.parent / "__main__.py")
        return self.zygote.spawn(
            [program, *argv[HARNESS_HEAD:]],
            env,
            os.getcwd(),
            subprocess.DEVNULL,
            subprocess.DEVNULL,  # the child's report folder says what it found
            subprocess.PIPE,
        )

    def run(self, argv: list[str], timeout: float) -> tuple[int | None, str, bool]:
        """(exit code, stderr, timed out); the code is None when the child was stopped.

        The child starts through the reaper's exec wrapper (PR_SET_PDEATHSIG): if this
        harness dies, even by SIGKILL, the kernel kills the child harness, whose own reaper
        then kills its trainer's tree. The wrapper is tied to the thread that starts it,
        which is the thread that waits for the child here. Forked by the zygote instead
        when there is one (the same session, limit and stopping; its PR_SET_PDEATHSIG is
        toward the zygote, which has its own toward this harness)."""
        # a child's own summary and annotations would repeat the parent's table
        env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROP}
        with self.lock:
            if self.stopping:  # the parent is being stopped: start nothing new
                return None, "the runs were stopped", False
            forked = self._fork(argv, env)
            if forked is not None:
                self.live.add(forked)
        if forked is not None:
            return self._wait(forked, timeout)
        status_r, status_w = os.pipe()
        try:
            with self.lock:
                if self.stopping:  # the parent is being stopped: start nothing new
                    return None, "the runs were stopped", False
                proc = subprocess.Popen(
                    reaper.pdeathsig_argv(argv, status_w),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,  # the child's report folder says what it found
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    pass_fds=(status_w,),
                    env=env,
                )
                self.live.add(proc)
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        try:
            try:
                failed = reaper.exec_failure(status_r)
            finally:
                os.close(status_r)
        except BaseException:
            self.stop(proc)
            with self.lock:
                self.live.discard(proc)
            raise
        if failed is not None:  # the harness's own Python could not start
            proc.wait()
            with self.lock:
                self.live.discard(proc)
            return None, f"cannot start the run's harness: {os.strerror(failed[0])}", False
        return self._wait(proc, timeout)

    def _wait(self, proc: Child, timeout: float) -> tuple[int | None, str, bool]:
        timed_out = False
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(proc)
            err = b""
        except BaseException:  # interrupted while waiting: this child goes with the parent
            self.stop(proc)
            raise
        finally:
            with self.lock:
                self.live.discard(proc)
        code = None if timed_out else proc.returncode
        return code, (err or b"").decode("utf-8", "replace"), timed_out

    @staticmethod
    def stop(proc: Child) -> None:
        ChildRuns.stop_many([proc])

    @staticmethod
    def stop_many(procs: list[Child]) -> None:
        """SIGTERM to every child's session at once (each kills its trainer and writes its
        partial report), one shared grace period, then each whole session killed and reaped:
        stopping eight children takes one grace period, not eight."""
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in procs:
            proctree.kill_tree(proc, proc.pid)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            running = list(self.live)
        self.stop_many(running)


# the child harness's argv for a report folder: the folder differs per run
ArgvFor = Callable[[Path], list[str]]


def run_child(
    argv_for: ArgvFor,
    folder: Path,
    limit_s: float,
    runner: ChildRuns,
    values: dict[str, str],
    variant: str,
) -> RunRow:
    """One run in a child harness writing into `folder`; its row, read from its report."""
    start = time.monotonic()
    code, stderr, timed_out = runner.run(argv_for(folder), limit_s)
    if timed_out:
        why = f"the run's harness timed out after {limit_s:.0f}s"
    else:
        why = (stderr.strip().splitlines() or [f"no report (exit {code})"])[-1][:300]
    row = load_row(folder, code, values, variant, why)
    if timed_out:  # its partial report, if any, is linked; the row says why it is partial
        row.kind, row.summary, row.error = Kind.ERROR, why, why
    row.wall_s = time.monotonic() - start
    return row
