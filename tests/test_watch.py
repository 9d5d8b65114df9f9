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

from tests.harness_cli import HarnessResult, harness, tree_is_gone

pytestmark = [pytest.mark.timeout(120), pytest.mark.spread]
FAST = ["--startup", "3", "--stall", "2", "--timeout", "40"]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def watch(
    tmp_path: Path,
    *cmd: str,
    opts: list[str] = FAST,
    interrupt: int | None = None,
    env: dict[str, str] | None = None,
) -> HarnessResult:
    reports = tmp_path / "reports"
    return harness("watch", *opts, "--", *cmd, report_root=reports, interrupt=interrupt, env=env)


def test_mutex_deadlock(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("mutex_deadlock")))
    v = res.report["verdict"]
    assert res.code == 2, res.stderr
    assert (v["kind"], v["mechanism"]) == ("hang", "deadlock")
    assert v["location"] in ("transfer_a_to_b", "transfer_b_to_a")
    assert "pthread mutex" in v["runtime"]
    # the two threads wait for each other's mutex (owners read from memory), main joins
    # them: a closed set of the wake graph, before the 2 s stall window
    assert res.report["trigger"] == "closed"
    assert res.report["samples"]["wake"]["end"] == "cycle"
    assert tree_is_gone(res.report["exit"]["pid"])
    assert (res.folder / "stacks.txt").read_text().count("transfer_") >= 2
    assert res.elapsed < 1 + 2 + 15  # the confirmation after the last output, plus sampling


def test_busy_spin(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("busy_spin")))
    v = res.report["verdict"]
    assert (res.code, v["mechanism"], v["location"]) == (2, "spin", "spin_forever")
    assert res.report["trigger"] == "startup"
    assert tree_is_gone(res.report["exit"]["pid"])


def test_exit_blocked_native(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("exit_blocked")))
    v = res.report["verdict"]
    assert (res.code, v["mechanism"], v["location"]) == (2, "exit-blocked", "wait_for_shutdown")


def test_exit_blocked_python(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "exit_blocked.py"))
    v = res.report["verdict"]
    assert (res.code, v["mechanism"]) == (2, "exit-blocked"), v
    assert v["location"] == "wait_for_shutdown"


def test_python_deadlock_located_by_py_spy(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "py_deadlock.py"))
    v = res.report["verdict"]
    assert (res.code, v["mechanism"]) == (2, "deadlock")
    assert v["location"] in ("transfer_a_to_b", "transfer_b_to_a")
    assert "py-spy" in " ".join(v["evidence"])


def test_segfault_is_a_crash(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    res = watch(tmp_path, str(c_program("segv")))
    v = res.report["verdict"]
    assert (res.code, v["kind"]) == (3, "crash")
    assert "SIGSEGV" in v["summary"]
    assert "loading config" in (res.folder / "output.log").read_text()


def test_slow_printer_is_never_a_hang(tmp_path: Path) -> None:
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "slow_printer.py"), "5")
    assert res.code == 0, res.report["verdict"]
    assert res.report["verdict"]["kind"] == "pass"
    assert res.report["progress"]["frames"] >= 10


def test_wall_timeout_while_printing(tmp_path: Path) -> None:
    opts = ["--startup", "3", "--stall", "2", "--timeout", "3"]
    res = watch(tmp_path, sys.executable, str(PROGRAMS / "slow_printer.py"), "30", opts=opts)
    assert res.code == 6
    assert res.report["verdict"]["kind"] == "timeout-progressing"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_harness_kills_the_tree(
    tmp_path: Path, c_program: Callable[[str], Path], sig: int
) -> None:
    opts = ["--startup", "30", "--stall", "30", "--timeout", "60"]
    res = watch(tmp_path, str(c_program("busy_spin")), opts=opts, interrupt=sig)
    assert res.code == 128 + sig, res.stderr
    report = res.report
    assert report["status"] == "interrupted"
    assert report["verdict"]["kind"] == "interrupted"
    pid = report["exit"].get("pid")
    if pid is not None:
        assert tree_is_gone(pid)
    else:
        # the signal landed while the launch waited for the trainer's exec: the launch kills
        # what it started before the pid reaches the report; no process of it may be left
        argv = report["command"]["argv"]
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
    report = res.report
    assert res.code == 2
    assert report["samples"]["tools"].get("eu-stack") == "missing"
    notes = report["samples"]["notes"]
    assert any("eu-stack not found on PATH: native stacks from gdb" in n for n in notes), notes
    assert report["samples"]["tools"].get("gdb") == "used"
    assert report["verdict"]["location"] in ("transfer_a_to_b", "transfer_b_to_a")  # gdb


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    res = watch(tmp_path, "/no/such/program")
    assert res.code == 5
    assert res.stderr.strip().splitlines() == [
        "harness: error: command not found: /no/such/program"
    ]
    res = harness("watch", "--parser", "nope", "--", "true", report_root=tmp_path / "r2")
    assert res.code == 5 and "Traceback" not in res.stderr
