"""`harness attach PID` on real trees the harness did not start: each is started here in its
own session (the `spawn` fixture: SIGKILLed and reaped at teardown, however the test ends),
the harness is run as a subprocess against its pid, and the report, the exit code and the
target afterwards are checked. The target must still run after the look (nothing stopped,
signalled or killed) unless `--kill` was given."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from harness.analysis.causes import Cause
from harness.outcome import HANG, OUTCOMES, TIMEOUT_PROGRESSING, USAGE, Kind
from harness.process import proctree
from harness.report.model import Report
from harness.vocab import Mechanism, RunMode, RunStatus, Trigger
from tests import facts
from tests.conftest import Spawned
from tests.harness_cli import (
    HarnessResult,
    in_session,
    only_report_dir,
    result_of,
    samples_of,
    verdict_of,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.spread]
ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
NOBODY = 65534
AS_NOBODY = ["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
EXITED = OUTCOMES[Kind.EXITED].exit_code
# "location transfer_a_to_b on pid 13628 tid 13629 ('…'), from eu-stack: …" (classify)
LOCATED = re.compile(r"location (\S+) on pid (\d+) tid (\d+)")


def attach(
    pid: int,
    report_root: Path,
    *opts: str,
    prefix: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 90,
    watching: Callable[[], None] | None = None,
) -> HarnessResult:
    """`[prefix] python -m harness attach PID --report-dir ROOT --json OPTS` to its end, in
    its own session (killed whole if it outlives `timeout`); `watching()` is called once
    its report.json says it watches (status running, stage run)."""
    argv = [*prefix, sys.executable, "-m", "harness", "attach", str(pid)]
    argv += ["--report-dir", str(report_root), "--json", *opts]
    start = time.monotonic()
    proc = in_session(argv, {**os.environ, **(env or {})})
    before = None
    if watching is not None:
        then = watching

        def before() -> None:
            until(lambda: _watching(report_root) or proc.poll() is not None, "the watch", 60)
            then()

    return result_of(proc, start, report_root, timeout, before)


def _watching(report_root: Path) -> bool:
    folder = only_report_dir(report_root)
    try:
        data = json.loads((folder / "report.json").read_text()) if folder else {}
    except (OSError, ValueError):  # not written yet (written atomically: never half)
        return False
    return (data.get("status"), data.get("stage")) == ("running", "run")


def tasks(pid: int) -> set[int]:
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


def assert_still_running(target: Spawned, *others: int) -> None:
    """The target (and `others` of its tree) run on: not exited, not a zombie, not left
    stopped or traced by a stack tool."""
    assert target.proc.poll() is None, f"the target exited ({target.proc.returncode})"
    for pid in (target.pid, *others):
        p = psutil.Process(pid)
        assert p.status() not in (
            psutil.STATUS_ZOMBIE,
            psutil.STATUS_STOPPED,
            psutil.STATUS_TRACING_STOP,
            psutil.STATUS_DEAD,
        ), (pid, p.status())
        with open(f"/proc/{pid}/status") as f:
            tracer = next(line for line in f if line.startswith("TracerPid:"))
        assert tracer.split()[1] == "0", f"pid {pid} is still traced: {tracer}"


def _ended(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def until(ready: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:g}s")
        time.sleep(0.05)


def located(report: Report) -> tuple[str, int, int]:
    """The verdict's location and the pid and tid it was found on (from its evidence)."""
    evidence = verdict_of(report).evidence
    found = [m for e in evidence if (m := LOCATED.match(e))]
    assert found, evidence
    name, pid, tid = found[0].groups()
    return name, int(pid), int(tid)


def cause(report: Report, cause_id: str) -> Cause:
    causes = {c.id: c for c in verdict_of(report).causes}
    assert cause_id in causes, f"no {cause_id} among {list(causes)}"
    return causes[cause_id]


def check_attach_report(res: HarnessResult, pid: int) -> Report:
    """What every attach report has: mode attach, the target's pid, the whole folder."""
    report = res.loaded
    assert report.mode is RunMode.ATTACH
    assert report.status is RunStatus.COMPLETE
    assert report.exit is not None, report
    assert report.exit.pid == pid
    assert report.exit.killed_by_harness is False
    files = ["report.md", "report.html"]
    if verdict_of(report).kind is Kind.HANG:  # stacks are taken on a hang only
        files += ["stacks.txt", "samples.json"]
    for name in files:
        assert (res.folder / name).is_file(), name
    # the exit code as written (the loaded verdict's is derived from its kind)
    assert res.report["verdict"]["exit_code"] == res.code
    assert json.loads(res.stdout)["run_id"] == report.run_id  # --json: the same report
    return report


@pytest.mark.slow
def test_lock_cycle_in_c_names_the_owners(
    tmp_path: Path, spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    target = spawn([c_program("mutex_deadlock")])
    target.expect("holds", count=2)
    before = tasks(target.pid)
    res = attach(target.pid, tmp_path, "--quiescent", "1")
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    v = verdict_of(report)
    got = (v.kind, v.mechanism, report.trigger)
    assert got == (Kind.HANG, Mechanism.DEADLOCK, Trigger.QUIESCENT)
    assert v.location in ("transfer_a_to_b", "transfer_b_to_a")
    cycle = cause(report, "lock-cycle")
    owners = {int(t) for e in cycle.evidence for t in re.findall(r"tid (\d+)", e)}
    # the two workers, each the owner of the mutex the other waits for: not main
    assert owners == before - {target.pid}, (owners, before)
    assert len(owners) == 2
    assert f"pid {target.pid}" in cycle.sentence
    # causes that rest on history before the first look are said to be judged without it
    assert any("attached after the start" in n for n in report.notes), report.notes
    assert_still_running(target)
    assert tasks(target.pid) == before


@pytest.mark.slow
@pytest.mark.needs_tool("py-spy", why="Python stacks of the attached interpreter")
def test_python_deadlock(tmp_path: Path, spawn: Callable[..., Spawned]) -> None:
    target = spawn([sys.executable, PROGRAMS / "py_deadlock.py"])
    target.expect("holds", count=2)
    res = attach(target.pid, tmp_path, "--quiescent", "1")
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    v = verdict_of(report)
    assert (v.kind, v.mechanism) == (Kind.HANG, Mechanism.DEADLOCK)
    name, pid, tid = located(report)
    assert name in ("transfer_a_to_b", "transfer_b_to_a") and name == v.location
    assert pid == target.pid and tid in tasks(target.pid)
    locks = cause(report, "python-locks")
    named = {int(t) for t in re.findall(r"tid (\d+)", locks.sentence)}
    assert named and named <= tasks(target.pid) - {target.pid}, (named, locks.sentence)
    assert_still_running(target)


@pytest.mark.slow
def test_spin_on_blocked_workers(
    tmp_path: Path, spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    target = spawn([c_program("spin_on_workers")])
    until(lambda: len(tasks(target.pid)) == 4, "main and its three workers")
    # the tree is busy (main spins): never quiescent, judged at the end of --duration
    res = attach(target.pid, tmp_path, "--duration", "3")
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    v = verdict_of(report)
    assert (v.kind, v.mechanism, report.trigger) == (Kind.HANG, Mechanism.SPIN, Trigger.DURATION)
    assert v.location == "wait_for_workers"
    spin = cause(report, "spin-on-blocked-workers")
    assert f"pid {target.pid}" in spin.sentence and "wait_for_workers" in spin.sentence
    assert_still_running(target)


@pytest.mark.slow
@pytest.mark.parametrize("program", ["fork_deadlock", "py_wait_stuck_child.py"])
def test_parent_waiting_on_a_stuck_child_is_located_in_the_child(
    program: str,
    tmp_path: Path,
    spawn: Callable[..., Spawned],
    c_program: Callable[[str], Path],
) -> None:
    if program.endswith(".py"):
        facts.require_tool("py-spy", why="Python stacks of the stuck child")
        target = spawn([sys.executable, PROGRAMS / program])
        target.expect("holds", count=2)  # the child's two threads hold one lock each
    else:
        target = spawn([c_program(program)])
    target.expect("supervising worker")
    m = re.search(rb"supervising worker (\d+)", target.output)
    assert m is not None
    child = int(m.group(1))
    assert psutil.Process(child).ppid() == target.pid
    res = attach(target.pid, tmp_path, "--quiescent", "1")
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    v = verdict_of(report)
    assert (v.kind, v.mechanism) == (Kind.HANG, Mechanism.DEADLOCK)
    name, pid, _ = located(report)
    assert pid == child, f"located in pid {pid}, the stuck child is {child}"
    assert name in ("take_a_then_b", "take_b_then_a", "transfer_a_to_b", "transfer_b_to_a")
    # the chain: the parent waits for the child, whose main waits for its stuck threads
    chain = v.waits_for
    assert f"pid {target.pid} waits for child pid {child}" in chain, chain
    assert f"pid {child} waits for another thread" in chain, chain
    locked = cause(report, "python-locks" if program.endswith(".py") else "lock-cycle")
    assert f"pid {child}" in locked.sentence, locked.sentence
    assert_still_running(target, child)


def _runs_as_nobody(prefix: list[str]) -> str | None:
    """None when uid 65534 can run this venv's Python and import the harness, else why not."""
    try:
        res = subprocess.run(
            [*prefix, sys.executable, "-c", "import harness.cli, psutil"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if res.returncode == 0 else (res.stderr.strip().splitlines() or ["?"])[-1]


@pytest.fixture
def world_writable_dir() -> Iterator[Path]:
    """A folder another user can write (pytest's tmp_path sits under a 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="attach-nobody-"))
    try:
        path.chmod(0o777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_ptrace_refused_gives_the_proc_report_and_one_line(
    world_writable_dir: Path, spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    facts.require_root("a root-owned target that another user's harness may not trace")
    setpriv = facts.require_tool("setpriv", why="the harness run as another user (nobody)")
    prefix = [setpriv, *AS_NOBODY]
    why = _runs_as_nobody(prefix)
    if why is not None:
        facts.missing(f"a venv readable by uid {NOBODY} ({why})", "the harness run as nobody")
    target = spawn([c_program("mutex_deadlock")])
    target.expect("holds", count=2)
    before = tasks(target.pid)
    reports = world_writable_dir / "reports"
    res = attach(
        target.pid,
        reports,
        "--duration",
        "3",
        "--quiescent",
        "1",
        prefix=prefix,
        env={"HOME": str(world_writable_dir)},
    )
    refused = [line for line in res.stderr.splitlines() if "ptrace" in line]
    assert len(refused) == 1, res.stderr
    assert "refused" in refused[0] and f"sudo harness attach {target.pid}" in refused[0]
    assert "Traceback" not in res.stderr
    # still a verdict: every thread asleep with no CPU is what /proc can tell
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    assert verdict_of(report).mechanism is Mechanism.DEADLOCK
    samples = samples_of(report)
    assert samples.stacks == [] and samples.tools == {}
    assert samples.snapshots, "no /proc snapshot"
    seen = {
        t.tid: t.state
        for p in samples.snapshots[-1].processes
        if p.pid == target.pid
        for t in p.threads
    }
    assert set(seen) == before and set(seen.values()) == {"S"}, seen
    assert any(n.startswith("/proc only: ptrace refused") for n in report.notes)
    assert_still_running(target)


@pytest.mark.slow
def test_kill_ends_the_target_and_its_children(
    tmp_path: Path, spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    target = spawn([c_program("fork_deadlock")])
    target.expect("supervising worker")
    m = re.search(rb"supervising worker (\d+)", target.output)
    assert m is not None
    child = psutil.Process(int(m.group(1)))
    res = attach(target.pid, tmp_path, "--quiescent", "1", "--kill")
    assert res.code == HANG, res.stderr
    report = check_attach_report(res, target.pid)
    assert set(report.cleanup.killed) == {target.pid, child.pid}
    assert report.cleanup.leftover == []
    assert target.proc.wait(timeout=10) == -signal.SIGKILL
    # the child's parent is gone: init (or a subreaper) reaps it; it must not run on
    until(lambda: _ended(child), f"the child {child.pid} ended")


@pytest.mark.slow
def test_a_busy_writer_is_not_a_hang(tmp_path: Path, spawn: Callable[..., Spawned]) -> None:
    target = spawn([sys.executable, PROGRAMS / "slow_printer.py", "60"])
    target.expect("step 1")
    res = attach(target.pid, tmp_path, "--duration", "2")
    assert res.code == TIMEOUT_PROGRESSING, res.stderr
    report = check_attach_report(res, target.pid)
    assert verdict_of(report).kind is Kind.TIMEOUT_PROGRESSING
    assert report.trigger is Trigger.DURATION
    assert_still_running(target)


@pytest.mark.slow
def test_an_exit_while_watched(tmp_path: Path, spawn: Callable[..., Spawned]) -> None:
    target = spawn([sys.executable, PROGRAMS / "slow_printer.py", "60"])
    target.expect("step 0")
    died = 0.0

    def kill_target() -> None:  # a real death while watched (left a zombie: ours to reap)
        nonlocal died
        died = time.monotonic()
        os.kill(target.pid, signal.SIGKILL)

    res = attach(target.pid, tmp_path, "--duration", "30", watching=kill_target)
    assert res.code == EXITED, res.stderr
    report = check_attach_report(res, target.pid)
    assert verdict_of(report).kind is Kind.EXITED
    assert report.trigger is Trigger.EXIT
    assert died and time.monotonic() - died < 20, "the exit was seen only at the window's end"


def _one_line_usage_error(res: HarnessResult, reports: Path) -> str:
    assert res.code == USAGE, (res.code, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert not reports.exists(), "a report folder for a pid never attached to"
    return lines[0]


def test_a_pid_that_does_not_exist(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()  # reaped: its pid names no process now
    reports = tmp_path / "reports"
    line = _one_line_usage_error(attach(done.pid, reports), reports)
    assert f"pid {done.pid} is not visible here" in line


def test_the_harness_own_parent_is_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    line = _one_line_usage_error(attach(os.getpid(), reports), reports)
    assert f"pid {os.getpid()}" in line and "ancestor" in line


def test_a_thread_id_is_not_a_process(
    tmp_path: Path, spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    """/proc/TID exists for every thread (not listed, but open to a path): a worker's tid
    given as the pid must be refused in one line naming its process, not diagnosed as a
    process of its own (the report would name pid TID, which no process has)."""
    target = spawn([c_program("mutex_deadlock")])
    target.expect("holds", count=2)
    worker = max(tasks(target.pid) - {target.pid})
    reports = tmp_path / "reports"
    # short limits: while this is a bug, the wrong diagnosis is not worth a long watch
    res = attach(worker, reports, "--duration", "1", "--quiescent", "0")
    line = _one_line_usage_error(res, reports)
    assert f"harness attach {target.pid}" in line, line
    assert_still_running(target)


KILL_TREE = """
import sys, time
from harness.execute.attach import kill_tree
start = time.monotonic()
report = kill_tree(int(sys.argv[1]))
print(time.monotonic() - start, len(report.killed), report.leftover)
"""


@pytest.mark.slow
def test_kill_does_not_wait_for_a_parent_to_reap(
    spawn: Callable[..., Spawned], c_program: Callable[[str], Path]
) -> None:
    """--kill from a harness that is not the target's parent: the killed target stays a
    zombie until its own parent (here this test, busy elsewhere) reaps it. A zombie is
    dead: the kill must not wait out its 5 s limit for it to vanish."""
    target = spawn([c_program("fork_deadlock")])
    target.expect("supervising worker")
    out = subprocess.run(
        [sys.executable, "-c", KILL_TREE, str(target.pid)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took, killed, leftover = out.stdout.split(maxsplit=2)
    assert (int(killed), leftover.strip()) == (2, "[]"), out.stdout + out.stderr
    assert target.proc.wait(timeout=10) == -signal.SIGKILL
    assert float(took) < 2.5, f"kill_tree took {float(took):.2f}s on a dead (zombie) target"


def test_written_since_counts_growth_never_an_exit() -> None:
    from harness.execute.attach import written_since

    # a process that wrote a lot and exited meanwhile is no negative progress
    assert written_since({1: 100, 2: 5_000_000}, {1: 100}) == 0
    assert written_since({1: 100}, {1: 160, 3: 40}) == 100  # growth, and a newborn's writes
    assert written_since({}, {}) is None  # nothing readable: unknown, not "nothing written"


@pytest.mark.slow
def test_kill_reaches_the_orphans_of_a_root_that_exited(
    tmp_path: Path, spawn: Callable[..., Spawned]
) -> None:
    """The root exits while watched and leaves a child behind: --kill after the report
    kills what the watch saw in the tree, not only what the root still has."""
    # the root lives 6 s: long enough for attach to start on a loaded machine (2 s was not
    # always: then the root had exited before attach looked, exit 5 instead of 8)
    target = spawn(["sh", "-c", "sleep 300 & echo started; sleep 6"])
    target.expect("started")
    # the shell's children: `sleep 300` (to be orphaned) and, by now or soon, `sleep 6`;
    # a forked child shows the shell's argv until its exec

    def sleepers() -> list[psutil.Process]:
        found = []
        for c in psutil.Process(target.pid).children():
            with contextlib.suppress(psutil.Error):  # `sleep 6` may end meanwhile
                if c.cmdline()[-1:] == ["300"]:
                    found.append(c)
        return found

    until(lambda: len(sleepers()) == 1, "the background sleep's exec", 10)
    (orphan,) = sleepers()
    try:
        res = attach(target.pid, tmp_path, "--duration", "20", "--kill")
        assert res.code == EXITED, res.stderr
        report = check_attach_report(res, target.pid)
        assert orphan.pid in report.cleanup.killed, report.cleanup
        until(lambda: not proctree.living(orphan), "the orphan's death", 10)
    finally:
        with contextlib.suppress(psutil.Error):
            orphan.kill()


# ------------------------------------------------- real-world hangs nobody here wrote

# Cases of the corpus (tests/realworld/cases.toml: public bug reports, run as their users
# run them), started by the test, hung before attach looks. A cause that rests on a fork or
# a death attach could not witness is given only on what is there now (a pool's
# replacement worker); otherwise the report says which causes needed that history.
REALWORLD = [
    "logging-dictconfig",
    "popen-wait-pipe",
    "mp-queue-join",
    "pool-sigkill",
    "sklearn-kmeans-fork",  # the fork before attach: the parent's team is still there
]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", REALWORLD)
def test_attach_on_a_real_world_hang(
    case_id: str, tmp_path: Path, spawn: Callable[..., Spawned]
) -> None:
    from harness.analysis.causes import checked_rules
    from harness.vocab import Need
    from tests.realworld.corpus import HERE, load_cases

    history = {c.rule.id for c in checked_rules() if Need.HISTORY in c.detector.needs}
    assert {"dead-worker", "pool-lost-worker", "openmp-after-fork", "fork-with-threads"} <= history

    (case,) = [c for c in load_cases() if c.id == case_id]
    assert case.expect is not None
    for module in case.modules:  # setup.sh installs them: missing fails under CI
        if importlib.util.find_spec(module) is None:
            facts.missing(f"the Python module {module}", f"the corpus case {case_id}")
    target = spawn(case.command(), cwd=HERE)
    time.sleep(3.0)  # every corpus hang sets in within about 2 s of start
    res = attach(target.pid, tmp_path, "--quiescent", "2", "--duration", "20")
    report = check_attach_report(res, target.pid)
    verdict = verdict_of(report)
    assert (verdict.kind, verdict.mechanism) == (Kind.HANG, case.expect.mechanism), verdict
    causes = [c.id for c in verdict.causes]
    if case.expect.cause in history and not causes:
        # the death happened before the first look and left nothing to see: the note says
        # which cause needed it
        assert case.expect.cause in " ".join(report.notes), report.notes
    else:  # seen from what is there now (pool-sigkill: the worker its pool started anew)
        assert causes == [case.expect.cause], causes
        assert re.search(case.expect.location, verdict.location or ""), verdict.location
    assert_still_running(target)
