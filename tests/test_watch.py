"""`harness watch` around small real programs: each hang mechanism, a crash, a slow but
progressing program, interruption of the harness, and degraded tools."""

from __future__ import annotations

import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from harness.outcome import Kind
from harness.vocab import Mechanism, RunStatus, Trigger, WakeEnd
from tests.harness_cli import (
    HarnessResult,
    exit_pid,
    harness,
    samples_of,
    tree_is_gone,
    verdict_of,
    watch_cmd,
    watch_opts,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.spread]
FAST = watch_opts(startup=3, stall=2, timeout=40)
PROGRAMS = Path(__file__).resolve().parent / "programs"


def watch(
    tmp_path: Path,
    *cmd: str,
    opts: tuple[str, ...] = FAST,
    interrupt: int | None = None,
    env: dict[str, str] | None = None,
) -> HarnessResult:
    return watch_cmd(tmp_path / "reports", *cmd, opts=opts, interrupt=interrupt, env=env)


def test_mutex_deadlock(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("mutex_deadlock")))
    report = res.loaded
    v = verdict_of(report)
    assert res.code == 2, res.stderr
    assert (v.kind, v.mechanism) == (Kind.HANG, Mechanism.DEADLOCK)
    assert v.location in ("transfer_a_to_b", "transfer_b_to_a")
    assert "pthread mutex" in v.runtime
    # the two threads wait for each other's mutex (owners read from memory), main joins
    # them: a closed set of the wake graph, before the 2 s stall window
    assert report.trigger is Trigger.CLOSED
    wake = samples_of(report).wake
    assert wake is not None and wake.end is WakeEnd.CYCLE, wake
    assert tree_is_gone(exit_pid(report))
    assert (res.folder / "stacks.txt").read_text().count("transfer_") >= 2
    assert res.elapsed < 1 + 2 + 15  # the confirmation after the last output, plus sampling


def test_busy_spin(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("busy_spin")))
    report = res.loaded
    v = verdict_of(report)
    assert (res.code, v.mechanism, v.location) == (2, Mechanism.SPIN, "spin_forever")
    assert report.trigger is Trigger.STARTUP
    assert tree_is_gone(exit_pid(report))


def test_exit_blocked_native(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("exit_blocked")))
    v = verdict_of(res.loaded)
    got = (res.code, v.mechanism, v.location)
    assert got == (2, Mechanism.EXIT_BLOCKED, "wait_for_shutdown")


def test_exit_blocked_python(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "exit_blocked.py"))
    v = verdict_of(res.loaded)
    assert (res.code, v.mechanism) == (2, Mechanism.EXIT_BLOCKED), v
    assert v.location == "wait_for_shutdown"


def test_python_deadlock_located_by_py_spy(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "py_deadlock.py"))
    v = verdict_of(res.loaded)
    assert (res.code, v.mechanism) == (2, Mechanism.DEADLOCK)
    assert v.location in ("transfer_a_to_b", "transfer_b_to_a")
    assert "py-spy" in " ".join(v.evidence)


def test_segfault_is_a_crash(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("segv")))
    v = verdict_of(res.loaded)
    assert (res.code, v.kind) == (3, Kind.CRASH)
    assert "SIGSEGV" in v.summary
    assert "loading config" in (res.folder / "output.log").read_text()


def test_slow_printer_is_never_a_hang(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "slow_printer.py"), "5")
    report = res.loaded
    assert res.code == 0, report.verdict
    assert verdict_of(report).kind is Kind.PASS
    assert report.progress.frames >= 10


def test_wall_timeout_while_printing(tmp_path: Path) -> None:
    opts = watch_opts(startup=3, stall=2, timeout=3)
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "slow_printer.py"), "30", opts=opts)
    assert res.code == 6
    assert verdict_of(res.loaded).kind is Kind.TIMEOUT_PROGRESSING


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_harness_kills_the_tree(
    tmp_path: Path, c_program: Callable[[str], Path], sig: int
) -> None:
    opts = watch_opts(startup=30, stall=30, timeout=60)
    res = watch(tmp_path, str(c_program("busy_spin")), opts=opts, interrupt=sig)
    assert res.code == 128 + sig, res.stderr
    report = res.loaded
    assert report.status is RunStatus.INTERRUPTED
    assert verdict_of(report).kind is Kind.INTERRUPTED
    pid = report.exit.pid if report.exit is not None else None
    if pid is not None:
        assert tree_is_gone(pid)
    else:
        # the signal landed while the launch waited for the trainer's exec: the launch kills
        # what it started before the pid reaches the report; no process of it may be left
        assert report.command is not None
        argv = report.command.argv
        left = []
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == argv:
                left.append(p.pid)
        assert left == [], left


@pytest.mark.needs_tool("gdb", why="the fallback for native stacks when eu-stack is missing")
def test_without_eu_stack_native_stacks_fall_back_to_gdb(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("gdb", "py-spy"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {"PATH": str(bare)}  # /bin is /usr/bin on merged-usr systems: it has eu-stack
    res = watch(tmp_path, str(c_program("mutex_deadlock")), env=env)
    report = res.loaded
    samples = samples_of(report)
    assert res.code == 2
    assert samples.tools.get("eu-stack") == "missing"
    notes = samples.notes
    assert any("eu-stack not found on PATH: native stacks from gdb" in n for n in notes), notes
    assert samples.tools.get("gdb") == "used"
    assert verdict_of(report).location in ("transfer_a_to_b", "transfer_b_to_a")  # gdb


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    res = watch(tmp_path, "/no/such/program")
    assert res.code == 5
    assert res.stderr.strip().splitlines() == [
        "harness: error: command not found: /no/such/program"
    ]
    res = harness("watch", "--parser", "nope", "--", "true", report_root=tmp_path / "r2")
    assert res.code == 5 and "Traceback" not in res.stderr
