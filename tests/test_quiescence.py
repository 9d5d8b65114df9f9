"""Quiescence (docs/quiescence.md): the pure rule over hand-made snapshots, each way; the
watchdog's trigger; the watch loop on real processes; and `harness watch`/`harness run` on
real programs, where only quiescence can fire early (startup and stall windows of 60 s):
deadlocks get their verdict long before the window, programs that only sleep, wait on a
sleeping writer or on a timer thread pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from harness.analysis.classify import classify
from harness.config.signatures import load_signatures
from harness.outcome import Kind
from harness.sampling.model import ProcessSample, Snapshot, ThreadSample
from harness.sampling.waits import ThreadWait
from harness.vocab import EventKind, Mechanism, WaitKind, WakeEnd
from harness.watch import quiescence as q
from harness.watch.watchdog import Limits, Trigger, Watchdog
from harness.watch.watchloop import TIMELINE_POINTS, WatchLoop, describe_status
from tests import samples
from tests.harness_cli import (
    HarnessResult,
    exit_pid,
    harness,
    run_s,
    samples_of,
    tree_is_gone,
    verdict_of,
    watch_cmd,
    watch_opts,
)
from tests.samples import sample_set

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

X86 = q.X86_64
FUTEX, NANOSLEEP, CLOCK_NANOSLEEP, WAIT4, WAITID, READ, POLL, EPOLL_WAIT = (
    202,
    35,
    230,
    61,
    247,
    0,
    7,
    232,
)
FUTEX_WAIT_PRIVATE = 128
FUTEX_WAIT_BITSET_REALTIME_PRIVATE = 9 | 128 | 256
FUTEX_WAKE_PRIVATE = 1 | 128
WINDOWS = watch_opts(startup=60, stall=60, timeout=90)

# ---------------------------------------------------------------- hand-made snapshots


th = samples.thread  # a thread as /proc shows it: asleep in futex(2) by default


def proc(pid: int, ppid: int, *threads: ThreadSample) -> ProcessSample:
    return ProcessSample(pid, ppid, "prog", "/bin/prog", ["prog"], "sleeping", False, list(threads))


def snap(t: float, *procs: ProcessSample) -> Snapshot:
    return Snapshot(t=t, processes=list(procs))


def wait_of(t: ThreadSample, facts: q.TreeFacts | None = None, *others: ProcessSample) -> q.Wait:
    p = proc(10, 1, t)
    return q.thread_wait(snap(0.0, p, *others), p, t, X86, facts)


def kind(t: ThreadSample, facts: q.TreeFacts | None = None, *others: ProcessSample) -> str:
    return wait_of(t, facts, *others).kind


def test_futex_waits_without_a_timeout_wait_on_the_tree() -> None:
    assert kind(th(10)) == q.TREE  # FUTEX_WAIT|PRIVATE, NULL timeout: a lock wait
    cond = th(10, args=(0x1000, FUTEX_WAIT_BITSET_REALTIME_PRIVATE, 0, 0, 0, 0xFFFFFFFF))
    assert kind(cond) == q.TREE  # glibc's untimed condvar/join/semaphore wait
    assert kind(th(10, args=(0x1000, 6 | 128, 0, 0, 0, 0))) == q.TREE  # FUTEX_LOCK_PI
    assert "no timeout" in wait_of(th(10)).what


def test_futex_waits_with_a_timeout_are_timed() -> None:
    assert kind(th(10, args=(0x1000, FUTEX_WAIT_PRIVATE, 0, 0x7FFD0000, 0, 0))) == q.TIMED
    timed_cond = (0x1000, FUTEX_WAIT_BITSET_REALTIME_PRIVATE, 0, 0x7FFD0000, 0, 0xFFFFFFFF)
    assert kind(th(10, args=timed_cond)) == q.TIMED  # pthread_cond_timedwait: absolute time
    assert kind(th(10, args=(0x1000, 6, 0, 0x7FFD0000, 0, 0))) == q.TIMED  # LOCK_PI, timed


def test_futex_wake_and_futex_waitv() -> None:
    assert kind(th(10, args=(0x1000, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0))) == q.RUNNING
    assert kind(th(10, nr=449, args=(0x2000, 2, 0, 0, 1, 0))) == q.TREE
    assert kind(th(10, nr=449, args=(0x2000, 2, 0, 0x7FFD0000, 1, 0))) == q.TIMED


def test_sleeps_are_timed() -> None:
    assert kind(th(10, nr=NANOSLEEP, args=(0x7FFD0000, 0, 0, 0, 0, 0))) == q.TIMED
    assert kind(th(10, nr=CLOCK_NANOSLEEP, args=(1, 0, 0x7FFD0000, 0, 0, 0))) == q.TIMED
    assert kind(th(10, nr=219, args=(0, 0, 0, 0, 0, 0))) == q.TIMED  # restart_syscall


def test_waiting_for_a_child() -> None:
    child = proc(11, 10, th(11))
    assert kind(th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0)), None, child) == q.TREE
    assert kind(th(10, nr=WAIT4, args=(12, 0x7FFD, 0, 0, 0, 0)), None, child) == q.OUTSIDE
    any_child = (0xFFFFFFFFFFFFFFFF, 0x7FFD, 0, 0, 0, 0)  # wait4(-1, ...)
    assert kind(th(10, nr=WAIT4, args=any_child), None, child) == q.TREE
    assert kind(th(10, nr=WAIT4, args=any_child)) == q.OUTSIDE  # no child in the tree
    assert kind(th(10, nr=WAIT4, args=(11, 0x7FFD, 1, 0, 0, 0)), None, child) == q.RUNNING
    assert kind(th(10, nr=WAITID, args=(1, 11, 0x7FFD, 4, 0, 0)), None, child) == q.TREE
    assert kind(th(10, nr=WAITID, args=(1, 99, 0x7FFD, 4, 0, 0)), None, child) == q.OUTSIDE
    assert kind(th(10, nr=WAITID, args=(0, 0, 0x7FFD, 4, 0, 0)), None, child) == q.TREE


def pipe_facts(**kw: object) -> q.TreeFacts:
    facts = q.TreeFacts(fds={(10, 3): "pipe:[777]"})
    for k, v in kw.items():
        setattr(facts, k, v)
    return facts


def test_reading_a_pipe() -> None:
    reader = th(10, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    pending = wait_of(reader)
    assert (pending.kind, pending.fd) == (q.UNKNOWN, 3)  # needs the facts first
    assert kind(reader, pipe_facts(writers={777: [11]})) == q.TREE
    assert kind(reader, pipe_facts(writers={777: [11]}, outside_writers={777: [5]})) == q.OUTSIDE
    assert kind(reader, pipe_facts()) == q.OUTSIDE  # no writer in the tree
    assert kind(reader, q.TreeFacts(fds={(10, 3): "socket:[55]"})) == q.OUTSIDE
    assert kind(reader, q.TreeFacts(fds={(10, 3): "/dev/pts/0"})) == q.OUTSIDE
    assert kind(reader, q.TreeFacts()) == q.UNKNOWN  # fd unreadable


def test_poll_select_epoll_and_states_are_not_the_tree() -> None:
    assert kind(th(10, nr=POLL, args=(0x7FFD, 1, 0xFFFFFFFF, 0, 0, 0))) == q.OUTSIDE
    assert kind(th(10, nr=EPOLL_WAIT, args=(4, 0x7FFD, 8, 0xFFFFFFFF, 0, 0))) == q.OUTSIDE
    assert kind(th(10, state="D")) == q.OUTSIDE
    assert kind(th(10, state="T")) == q.OUTSIDE
    assert kind(th(10, state="R", nr="running")) == q.RUNNING
    assert kind(th(10, state="Z", nr="")) == q.DONE
    assert kind(th(10, nr="")) == q.UNKNOWN  # syscall unreadable
    assert kind(th(10, nr="-1")) == q.UNKNOWN  # asleep outside a syscall
    assert kind(th(10), q.TreeFacts(compat={10})) == q.UNKNOWN  # 32-bit numbers differ


def test_unknown_architecture_never_quiescent() -> None:
    p = proc(10, 1, th(10))
    assert q.table_for("riscv64") is None and q.table_for("arm64") is q.AARCH64
    assert q.thread_wait(snap(0, p), p, p.threads[0], None).kind == q.UNKNOWN
    assert q.quiet_since([snap(0, p), snap(9, p)], None) is None


def test_aarch64_numbers() -> None:
    arm = q.AARCH64
    assert (arm.name(98), arm.name(260), arm.name(95), arm.name(63), arm.name(115)) == (
        "futex",
        "wait4",
        "waitid",
        "read",
        "clock_nanosleep",
    )
    p = proc(10, 1, th(10, nr=98))  # futex on aarch64
    assert q.thread_wait(snap(0, p), p, p.threads[0], arm).kind == q.TREE
    p = proc(10, 1, th(10, nr=101, args=(0x7FFD, 0, 0, 0, 0, 0)))  # nanosleep on aarch64
    assert q.thread_wait(snap(0, p), p, p.threads[0], arm).kind == q.TIMED


@pytest.mark.parametrize(
    ("header", "table"),
    [
        ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", q.X86_64),
        ("/usr/include/asm-generic/unistd.h", q.AARCH64),
    ],
)
def test_numbers_match_the_kernel_headers(header: str, table: q.SyscallTable) -> None:
    path = Path(header)
    if not path.exists():
        pytest.skip(f"no {header}")
    text = path.read_text()
    for number, name in table.names.items():
        assert f"_{name} {number}\n" in text or f"_{name}\t{number}\n" in text, name


def test_a_timer_signal_may_end_a_futex_wait() -> None:
    p = proc(10, 1, th(10))
    facts = q.TreeFacts(signalled={(10, 10): "catches SIGALRM"})
    waits = q.tree_waits(snap(0, p), X86, facts)
    assert waits[0][1].kind == q.TIMED and "SIGALRM" in waits[0][1].what


def test_is_blocked_needs_every_live_thread_on_the_tree() -> None:
    def blocked(*threads: ThreadSample) -> bool:
        return q.is_blocked(q.tree_waits(snap(0, proc(10, 1, *threads)), X86))

    assert blocked(th(10), th(11))
    assert blocked(th(10, state="Z", nr=""), th(11))  # an exited main thread waits on nothing
    assert not blocked(th(10), th(11, nr=NANOSLEEP, args=(1, 0, 0, 0, 0, 0)))
    assert not blocked(th(10), th(11, state="R", nr="running"))
    assert not blocked(th(10, state="Z", nr=""))  # nothing live
    reader = th(11, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    waits = q.tree_waits(snap(0, proc(10, 1, th(10), reader)), X86)
    assert not q.is_blocked(waits) and q.needs_facts(waits)
    assert q.pending_fds(waits) == [(10, 3)]
    running = th(12, state="R", nr="running")
    waits = q.tree_waits(snap(0, proc(10, 1, reader, running)), X86)
    assert not q.needs_facts(waits)  # a running thread settles it: no need to look at the fd
    sleeper = th(12, nr=NANOSLEEP, args=(1, 0, 0, 0, 0, 0))
    waits = q.tree_waits(snap(0, proc(10, 1, reader, sleeper)), X86)
    assert q.needs_facts(waits)  # a sleeper may be housekeeping: the facts are read
    assert not q.needs_facts(q.tree_waits(snap(0, proc(10, 1, sleeper)), X86))  # nothing on it


def test_woke_sees_any_movement() -> None:
    base = snap(0, proc(10, 1, th(10, runs=5), th(11, runs=7)))
    same = snap(1, proc(10, 1, th(10, runs=5), th(11, runs=7)))
    assert q.woke(base, same) is None
    assert "CPU" in (q.woke(base, snap(1, proc(10, 1, th(10, cpu=0.01), th(11)))) or "")
    assert "scheduled" in (q.woke(base, snap(1, proc(10, 1, th(10, runs=6), th(11)))) or "")
    other_futex = th(11, args=(0x2000, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0))
    assert "waits on" in (q.woke(base, snap(1, proc(10, 1, th(10), other_futex))) or "")
    assert "thread" in (q.woke(base, snap(1, proc(10, 1, th(10)))) or "")
    assert "process" in (q.woke(base, snap(1, proc(10, 1, th(10), th(11)), proc(12, 10))) or "")
    # a tracer's attach: a little CPU and a reschedule are forgiven in the confirmation
    traced = snap(1, proc(10, 1, th(10, cpu=0.01, runs=9), th(11, runs=7)))
    assert q.woke(base, traced, cpu_slack=0.05, runs=False) is None


def test_quiet_since_over_a_run_of_snapshots() -> None:
    blocked = [snap(t, proc(10, 1, th(10), th(11))) for t in (0.0, 0.25, 0.5, 0.75)]
    assert q.quiet_since(blocked, X86) == 0.0
    assert q.quiet_since(blocked, X86, output_at=0.3) == 0.5  # output: the run restarts
    moved = [*blocked[:2], snap(0.5, proc(10, 1, th(10, cpu=0.02), th(11))), blocked[3]]
    assert q.quiet_since(moved, X86) == 0.5
    sleeping = snap(1.0, proc(10, 1, th(10), th(11, nr=NANOSLEEP, args=(1, 0, 0, 0, 0, 0))))
    assert q.quiet_since([*blocked, sleeping], X86) is None
    reader = th(11, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    piped = [snap(t, proc(10, 1, th(10), reader)) for t in (0.0, 0.25)]
    facts = [pipe_facts(writers={777: [10]})] * 2
    assert q.quiet_since(piped, X86) is None  # the fd not looked at: not proven
    assert q.quiet_since(piped, X86, facts) == 0.0


# ---------------------------------------------------------------- watchdog and classify


def test_watchdog_quiescent_trigger() -> None:
    dog = Watchdog(Limits(wall_s=60, startup_s=30, stall_s=30, quiescent_s=5), started_at=0.0)
    dog.quiet(1.0)
    assert dog.check(5.9) is None
    assert dog.check(6.0) is Trigger.QUIESCENT
    assert "every thread blocked on the tree for 5.0s" in dog.reason(Trigger.QUIESCENT, 6.0)
    dog.quiet(None)
    assert dog.check(29.0) is None and dog.check(30.0) is Trigger.STARTUP
    off = Watchdog(Limits(wall_s=60, startup_s=30, stall_s=30, quiescent_s=0), started_at=0.0)
    off.quiet(0.0)
    assert off.check(29.0) is None
    walled = Watchdog(Limits(wall_s=3, startup_s=30, stall_s=30, quiescent_s=1), started_at=0.0)
    walled.quiet(0.0)
    assert walled.check(3.0) is Trigger.WALL  # wall wins
    assert Limits(1, 2, 3).quiescent_s == 5.0 and "quiescence off" in off.limits.describe()


def test_classify_quiescent_is_a_deadlock() -> None:
    samples = sample_set(
        waits=[ThreadWait(10, 10, WaitKind.TREE, "futex wait, no timeout (FUTEX_WAIT)")]
    )
    reason = "every thread blocked on the tree for 5.1s (no CPU, no output)"
    v = classify(Trigger.QUIESCENT, reason, None, False, samples, [], load_signatures())
    assert (v.kind, v.mechanism, v.exit_code) == ("hang", "deadlock", 2)
    assert v.evidence[0] == reason
    assert "waits on the tree: futex wait" in v.evidence[1]
    v = classify(Trigger.QUIESCENT, reason, None, False, None, [], load_signatures())
    assert (v.mechanism, v.summary) == ("deadlock", "hang (deadlock): " + reason)


# ---------------------------------------------------------------- the watch loop


def test_watch_loop_bounds_its_memory() -> None:
    loop = WatchLoop(2**22 + 12345, 0.0)  # no such process: empty snapshots, cheap
    for i in range(2000):
        loop.take(now=i * 0.25)
    assert len(loop.recent) <= 24 and len(loop.history) <= TIMELINE_POINTS
    timeline = loop.timeline()
    assert timeline[0].t == 0.0 and timeline[-1].t == 1999 * 0.25
    assert len(timeline) <= TIMELINE_POINTS + 24


def test_watch_loop_sees_births_and_exit_statuses() -> None:
    code = (
        "import os, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(3)\n"
        "time.sleep(1.0)\n"  # the child stays a zombie meanwhile
        "os.waitpid(pid, 0)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", code])
    start = time.monotonic()
    loop = WatchLoop(root.pid, start)
    try:
        while root.poll() is None and time.monotonic() - start < 10:
            loop.tick(time.monotonic())
            time.sleep(0.05)
        loop.root_exited(root.wait(), time.monotonic())
    finally:
        loop.close()
    events = [(e.event, e.pid, e.status) for e in loop.events]
    assert events[0] == ("start", root.pid, "")
    child = [e for e in loop.events if e.pid != root.pid]
    assert [(e.event, e.status) for e in child] == [("start", ""), ("exit", "exited 3")]
    assert events[-1] == ("exit", root.pid, "exited 0")
    assert describe_status(9) == "killed by SIGKILL"


def test_watch_loop_on_a_deadlocked_tree(c_program: Callable[[str], Path]) -> None:
    root = subprocess.Popen([c_program("fork_deadlock")], stdout=subprocess.DEVNULL)
    start = time.monotonic()
    loop = WatchLoop(root.pid, start)
    try:
        while loop.quiet_since is None or time.monotonic() - loop.quiet_since < 1.0:
            assert time.monotonic() - start < 20, [w.what for w, _ in loop._waits]
            loop.tick(time.monotonic())
            time.sleep(0.05)
        assert loop.confirm() is None
        samples = sample_set()
        loop.annotate(samples)
        worker = next(e.pid for e in loop.events if e.pid != root.pid)
        os.kill(worker, signal.SIGKILL)  # the tree moves: the parent's wait4 returns
        root.wait(timeout=10)
        assert loop.confirm() is not None
    finally:
        root.kill()
        root.wait()
        loop.close()
    whats = sorted(w.what for w in samples.waits)
    assert any(w.startswith("wait4 for child") for w in whats), whats  # so waits is not empty
    assert all(w.kind == "tree" for w in samples.waits)
    assert samples.timeline[-1].quiet and samples.watch is not None
    assert samples.watch.quiescence.startswith("on")


# ---------------------------------------------------------------- real programs


def watch(tmp_path: Path, *cmd: str) -> HarnessResult:
    """`harness watch` with the 60 s windows and a quiescence window of 2 s."""
    return watch_cmd(tmp_path / "reports", *cmd, opts=(*WINDOWS, "--quiescent", "2"))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", ["mutex_deadlock", "fork_deadlock", "pipe_deadlock"])
def test_deadlocks_get_an_early_verdict(
    tmp_path: Path, c_program: Callable[[str], Path], program: str
) -> None:
    res = watch(tmp_path, str(c_program(program)))
    report = res.loaded
    v, samples = verdict_of(report), samples_of(report)
    assert res.code == 2, res.stderr
    # every thread waits for another of the set, proven by the wake graph: the closed-set
    # verdict (1 s of confirmation) comes before the quiescence window (2 s here)
    got = (report.trigger, v.kind, v.mechanism)
    assert got == (Trigger.CLOSED, Kind.HANG, Mechanism.DEADLOCK)
    assert "nothing outside the set could wake it" in v.evidence[0]
    assert samples.wake is not None
    assert samples.wake.end in (WakeEnd.CYCLE, WakeEnd.NOBODY), samples.wake
    assert run_s(report) < 1 + 10  # the confirmation and a margin
    assert res.elapsed < 60  # well before the startup window
    assert tree_is_gone(exit_pid(report))
    assert samples.timeline and samples.timeline[-1].quiet
    assert samples.events[0].event is EventKind.START
    assert samples.waits, samples  # every thread's wait, named
    assert all(w.kind in (WaitKind.TREE, WaitKind.DONE) for w in samples.waits)
    if program != "mutex_deadlock":
        assert len({e.pid for e in samples.events}) == 2  # parent and child


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("program", "seconds"), [("sleepers", 10), ("pipe_late_writer", 8), ("condvar_timer", 8)]
)
def test_programs_that_only_wait_for_a_while_pass(
    tmp_path: Path, c_program: Callable[[str], Path], program: str, seconds: int
) -> None:
    res = watch(tmp_path, str(c_program(program)), str(seconds))
    report = res.loaded
    verdict = verdict_of(report)
    assert (res.code, report.trigger, verdict.kind) == (0, Trigger.EXIT, Kind.PASS), verdict
    assert run_s(report) >= seconds


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_quiescent_zero_turns_it_off(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    opts = watch_opts(startup=4, stall=4, quiescent=0)
    res = watch_cmd(tmp_path / "r", str(c_program("fork_deadlock")), opts=opts)
    report = res.loaded
    assert (res.code, report.trigger) == (2, Trigger.STALL)  # it printed one line
    assert report.limits is not None and report.limits.quiescent_s == 0
    watched = samples_of(report).watch
    assert watched is not None and watched.quiescence == "off (--quiescent 0)"


def test_negative_quiescent_is_a_usage_error(tmp_path: Path) -> None:
    res = harness("watch", "--quiescent", "-1", "--", "true", report_root=tmp_path)
    assert res.code == 5 and "--quiescent" in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_stock_replica_early_verdict_in_env_start(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: str
) -> None:
    harness("build", "breakout", report_root=tmp_path, env=cache_env)
    res = harness("run", "breakout", *WINDOWS, report_root=tmp_path / "r", env=cache_env)
    report = res.loaded
    v = verdict_of(report)
    assert res.code == 2, res.stdout + res.stderr
    # the parent waits for the child, whose threads wait on private futexes of their own
    # process: a closed set of the wake graph, after its 1 s confirmation (before: the 5 s
    # quiescence window, 5.4-6.1 s)
    got = (report.trigger, v.mechanism, v.location)
    assert got == (Trigger.CLOSED, Mechanism.DEADLOCK, "env_start")
    assert run_s(report) < 1 + 10  # the confirmation and a margin, not 60
    waits = samples_of(report).waits
    assert any(w.what.startswith("wait4 for child") for w in waits), waits
    assert tree_is_gone(exit_pid(report))


# ---------------------------------------------------------------- writes, polls, structure

WRITE, PPOLL = 1, 271


def test_a_write_to_a_full_pipe_read_only_by_the_tree_waits_on_the_tree() -> None:
    # Popen(stdout=PIPE).wait(): the child writes a full pipe that only its parent reads
    writer = th(10, nr=WRITE, args=(1, 0x7FFD, 65536, 0, 0, 0))
    facts = q.TreeFacts(fds={(10, 1): "pipe:[777]"}, readers={777: [9]})
    w = wait_of(writer, facts)
    assert (w.kind, w.on, w.peers) == (q.TREE, "pipe:[777]", (9,))
    assert "read only by the tree" in w.what
    # the root's stdout: the harness's output pump (outside the tree) reads it
    outside = q.TreeFacts(fds={(10, 1): "pipe:[777]"}, readers={777: [9]})
    outside.outside_readers = {777: [4242]}
    assert kind(writer, outside) == q.OUTSIDE
    assert kind(writer, q.TreeFacts(fds={(10, 1): "pipe:[777]"})) == q.OUTSIDE  # no reader
    assert kind(writer, q.TreeFacts(fds={(10, 1): "/tmp/log"})) == q.OUTSIDE
    assert wait_of(writer).pending == "fd"  # not looked at yet


def test_structured_fields_of_each_wait() -> None:
    w = wait_of(th(10, args=(0x7F00AB, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0)))
    assert (w.on, w.peers) == ("futex:0x7f00ab", ())
    child = proc(11, 10, th(11))
    w = wait_of(th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0)), None, child)
    assert (w.on, w.peers) == ("child:11", (11,))
    any_child = (0xFFFFFFFFFFFFFFFF, 0x7FFD, 0, 0, 0, 0)
    w = wait_of(th(10, nr=WAIT4, args=any_child), None, child)
    assert (w.on, w.peers) == ("child:any", (11,))
    reader = th(10, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    w = wait_of(reader, pipe_facts(writers={777: [12, 11]}))
    assert (w.on, w.peers) == ("pipe:[777]", (11, 12))
    w = wait_of(reader, q.TreeFacts(fds={(10, 3): "socket:[55]"}))
    assert (w.kind, w.on, w.peers) == (q.OUTSIDE, "socket:[55]", ())
    tw = q.tree_waits(snap(0, proc(10, 1, reader)), X86, pipe_facts(writers={777: [11]}))[0][0]
    assert (tw.on, tw.peers) == ("pipe:[777]", [11])  # and in the report's ThreadWait


def poll_facts(polled: list[tuple[int, int]], **kw: object) -> q.TreeFacts:
    facts = q.TreeFacts(polled={(10, 10): polled})
    for k, v in kw.items():
        setattr(facts, k, v)
    return facts


def test_a_poll_on_pipes_of_the_tree() -> None:
    # multiprocessing.Pool's worker handler: poll(sentinels + change notifier, -1)
    untimed = th(10, nr=POLL, args=(0x7F00, 2, 0xFFFFFFFF, 0, 0, 0))
    fds = {(10, 4): "pipe:[701]", (10, 6): "pipe:[702]"}
    facts = poll_facts([(4, 1), (6, 1)], fds=fds, writers={701: [11], 702: [10]})
    w = wait_of(untimed, facts)
    assert (w.kind, w.on, w.peers, w.idle) == (q.TREE, "pipe:[701],pipe:[702]", (10, 11), False)
    timed = th(10, nr=POLL, args=(0x7F00, 2, 100, 0, 0, 0))
    w = wait_of(timed, facts)
    assert (w.kind, w.idle) == (q.TIMED, True)  # a housekeeping candidate
    assert wait_of(untimed).pending == "poll"
    leaky = poll_facts([(4, 1), (6, 1)], fds=fds, writers={701: [11], 702: [10]})
    leaky.outside_writers = {702: [4242]}
    assert kind(untimed, leaky) == q.OUTSIDE  # a writer outside the tree
    sock = poll_facts([(4, 1)], fds={(10, 4): "socket:[55]"})
    assert kind(untimed, sock) == q.OUTSIDE  # a socket whose peer is not known
    sock.socket_peers = {55: [11]}  # a loopback connection held by the tree
    w = wait_of(untimed, sock)
    assert (w.kind, w.on, w.peers) == (q.TREE, "socket:[55]", (11,))
    assert kind(untimed, q.TreeFacts()) == q.OUTSIDE  # the fds could not be read
    # ppoll with a NULL timeout is untimed, with one timed; select(0, ..., &tv) is a sleep
    assert kind(th(10, nr=PPOLL, args=(0x7F00, 2, 0, 0, 8, 0)), facts) == q.TREE
    assert kind(th(10, nr=PPOLL, args=(0x7F00, 2, 0x7FFD, 0, 8, 0)), facts) == q.TIMED
    assert wait_of(th(10, nr=23, args=(0, 0, 0, 0, 0x7FFD, 0)), poll_facts([])).idle


# ---------------------------------------------------------------- housekeeping

IO = {10: (100, 200), 20: (5, 5)}


def sleeper(tid: int, cpu: float = 0.0, runs: int = 0, args: tuple[int, ...] = ()) -> ThreadSample:
    return th(tid, nr=CLOCK_NANOSLEEP, args=args or (1, 1, 0x7FFD10, 0, 0, 0), cpu=cpu, runs=runs)


def hk_run(
    seconds: float = 6.0,
    make: Callable[[int], list[ProcessSample]] | None = None,
    io: Callable[[int], dict[int, tuple[int, int]]] | None = None,
) -> tuple[list[Snapshot], list[dict[int, tuple[int, int]] | None]]:
    """A lock-order deadlock (10, 11) beside a heartbeat thread (12) waking 10 times a
    second, looked at every 0.25 s."""

    def default(i: int) -> list[ProcessSample]:
        return [proc(10, 1, th(10), th(11, args=(0x2000, 128, 0, 0, 0, 0)), sleeper(12, runs=i))]

    n = int(seconds / 0.25) + 1
    snaps = [snap(i * 0.25, *(make or default)(i)) for i in range(n)]
    return snaps, [(io or (lambda i: IO))(i) for i in range(n)]


def test_a_heartbeat_beside_a_deadlock_is_housekeeping() -> None:
    snaps, io = hk_run()
    since = q.quiet_since(snaps, X86, None, None, io)
    assert since is not None and since == pytest.approx(5.0)  # proven after 5 s, then quiet
    history = [q.judge(s, X86, None, [], i)[1] for s, i in zip(snaps, io, strict=True)]
    waits, _ = q.judge(snaps[-1], X86, None, history[:-1], io[-1])
    hk = [tw for tw, _ in waits if tw.kind == q.HOUSEKEEPING]
    assert [tw.tid for tw in hk] == [12] and q.is_blocked(waits)
    assert "clock_nanosleep" in hk[0].what and "every ~0.25s" in hk[0].what  # the period seen
    assert "0.00s of CPU" in hk[0].what
    assert q.quiet_since(snaps[:18], X86, None, None, io[:18]) is None  # 4.25 s: not yet


def test_housekeeping_needs_io_counters_and_consecutive_looks() -> None:
    snaps, io = hk_run()
    assert q.quiet_since(snaps, X86) is None  # no I/O counters: nothing excused
    gap = [*snaps[:4], *(Snapshot(s.t + 3, s.processes) for s in snaps[4:])]
    assert q.quiet_since(gap, X86, None, None, io) == pytest.approx(9.0)  # 5 s after the gap


def test_a_timed_waiter_whose_cpu_is_not_negligible_is_not_housekeeping() -> None:
    def busy(i: int) -> list[ProcessSample]:
        return [proc(10, 1, th(10), sleeper(12, cpu=0.02 * i, runs=i))]  # 8% of a core

    snaps, io = hk_run(make=busy)
    assert q.quiet_since(snaps, X86, None, None, io) is None


def test_a_timed_waiter_whose_arguments_change_is_not_housekeeping() -> None:
    def moving(i: int) -> list[ProcessSample]:
        return [
            proc(10, 1, th(10), sleeper(12, runs=i, args=(1, 1, 0x7FFD10 + i % 2 * 8, 0, 0, 0)))
        ]

    snaps, io = hk_run(make=moving)
    assert q.quiet_since(snaps, X86, None, None, io) is None


def test_a_tree_of_only_housekeeping_threads_is_not_a_deadlock() -> None:
    def idle(i: int) -> list[ProcessSample]:
        return [proc(10, 1, sleeper(10, runs=i), sleeper(11, runs=i))]

    snaps, io = hk_run(seconds=10, make=idle)
    assert q.quiet_since(snaps, X86, None, None, io) is None


def test_one_long_sleep_is_not_housekeeping() -> None:
    # a pool worker inside a task's time.sleep(10) while the caller waits for it
    def task(i: int) -> list[ProcessSample]:
        return [proc(10, 1, th(10), sleeper(12, runs=1))]

    snaps, io = hk_run(seconds=10, make=task)
    assert q.quiet_since(snaps, X86, None, None, io) is None


def test_a_thread_that_did_real_work_in_between_is_not_housekeeping() -> None:
    # bytes read or written by the tree (the sleeper polled a file, say) restart the span
    snaps, io = hk_run(io=lambda i: {10: (100 + (i == 10), 200), 20: (5, 5)})
    assert q.quiet_since(snaps, X86, None, None, io) is None

    # a process started in between: the span starts after it
    def born(i: int) -> list[ProcessSample]:
        extra = [proc(20, 10, th(20))] if i >= 10 else []
        return [proc(10, 1, th(10), sleeper(12, runs=i)), *extra]

    snaps, io = hk_run(make=born)
    assert q.quiet_since(snaps, X86, None, None, io) is None
    # a timer signal may end the tree's waits: they are timed, nothing is excused
    snaps, io = hk_run()
    facts = [q.TreeFacts(signalled={(10, 10): "catches SIGALRM"})] * len(snaps)
    assert q.quiet_since(snaps, X86, facts, None, io) is None


# ---------------------------------------------------------------- restarted syscalls

RESTART = 219  # restart_syscall on x86_64
POLL_WCHAN = "poll_schedule_timeout.constprop.0"


def poller(
    tid: int, nr: int = POLL, timeout: int = 0xFFFFFFFF, wchan: str = POLL_WCHAN
) -> ThreadSample:
    """multiprocessing.Pool's worker handler: poll(sentinels + change notifier, -1); after a
    tracer's attach (the harness's own stack dump) it shows restart_syscall with the same
    argument registers and wchan (seen on Linux 6.x: tests/test_housekeeping.py)."""
    t = th(tid, nr=nr, args=(0x7F00, 2, timeout, 0, 0, 0))
    t.wchan = wchan
    return t


def handler_facts() -> q.TreeFacts:
    fds = {(10, 4): "pipe:[701]", (10, 6): "pipe:[702]"}
    facts = poll_facts([(4, 1), (6, 1)], fds=fds, writers={701: [11], 702: [10]})
    facts.polled[(10, 12)] = facts.polled.pop((10, 10))
    return facts


def test_a_restarted_poll_seen_before_is_that_poll_continued() -> None:
    calls: q.Calls = {}
    first = snap(0, proc(10, 1, th(10), poller(12)))
    judged, calls, restarted = q.continued(first, X86, calls)
    assert judged is first and not restarted and calls[(10, 12)][0] == str(POLL)
    later = snap(0.25, proc(10, 1, th(10), poller(12, nr=RESTART)))
    judged, calls, restarted = q.continued(later, X86, calls)
    assert restarted == {(10, 12)}
    assert judged.processes[0].threads[1].syscall == str(POLL)  # judged as the poll
    assert later.processes[0].threads[1].syscall == str(RESTART)  # the snapshot is untouched
    waits = q.tree_waits(judged, X86, handler_facts(), restarted)
    w = dict(((tw.tid, tw) for tw, _ in waits))[12]
    assert w.kind == q.TREE and "restart_syscall" in w.what and w.on == "pipe:[701],pipe:[702]"
    # and the memory holds while it stays restarted
    _, calls, restarted = q.continued(later, X86, calls)
    assert restarted == {(10, 12)}


def test_a_tree_blocked_on_a_restarted_poll_stays_quiescent() -> None:
    # the poll, then restart_syscall from the dump's attach: nothing moved, still blocked
    snaps = [
        snap(i * 0.25, proc(10, 1, th(10), poller(12, nr=POLL if i < 3 else RESTART)))
        for i in range(8)
    ]
    facts = [handler_facts()] * len(snaps)
    assert q.quiet_since(snaps, X86, facts) == 0.0
    # without the memory (first seen restarted) it is a timed wait: not quiescent
    assert q.quiet_since(snaps[3:], X86, facts[3:]) is None


def test_a_restart_that_is_not_the_same_call_is_judged_as_restart_syscall() -> None:
    untimed = proc(10, 1, th(10), poller(12))

    def after(t: ThreadSample) -> q.Wait:
        _, calls, _ = q.continued(snap(0, untimed), X86, {})
        judged, _, restarted = q.continued(snap(0.25, proc(10, 1, th(10), t)), X86, calls)
        waits = q.tree_waits(judged, X86, handler_facts(), restarted)
        return dict(((tw.tid, w) for tw, w in waits))[12]

    # other arguments (a poll with a 100 ms timeout between the looks), another wchan (a
    # nanosleep interrupted), or a thread not in S: restart_syscall, timed, never the tree
    for t in (poller(12, RESTART, timeout=100), poller(12, RESTART, wchan="hrtimer_nanosleep")):
        w = after(t)
        # not idle: its timeout is not shown, it may continue a poll with none
        assert (w.kind, w.idle) == (q.TIMED, False) and "restart_syscall" in w.what
    assert after(poller(12, RESTART)).kind == q.TREE  # the same: continued
    # a timed poll continued stays timed (a housekeeping candidate)
    _, calls, _ = q.continued(snap(0, proc(10, 1, th(10), poller(12, timeout=100))), X86, {})
    judged, _, restarted = q.continued(
        snap(0.25, proc(10, 1, th(10), poller(12, RESTART, timeout=100))), X86, calls
    )
    w = dict(((tw.tid, w) for tw, w in q.tree_waits(judged, X86, handler_facts(), restarted)))[12]
    assert (w.kind, w.idle, restarted) == (q.TIMED, True, {(10, 12)})
    # an unknown architecture remembers nothing
    assert q.continued(snap(0, untimed), None, {})[1] == {}


# ---------------------------------------------------------------- the program's own loop


def test_a_main_thread_sleeping_in_a_loop_is_never_housekeeping() -> None:
    # `for _ in range(150): time.sleep(0.1)` in main beside an idle pool worker (an untimed
    # futex wait): the program working, not housekeeping, however long it looks idle
    def main_sleeps(i: int) -> list[ProcessSample]:
        return [proc(10, 1, sleeper(10, runs=i), th(11))]

    snaps, io = hk_run(seconds=10, make=main_sleeps)
    assert q.quiet_since(snaps, X86, None, None, io) is None
    waits = q.tree_waits(snaps[-1], X86)
    assert not q.needs_facts(waits)  # nor are the facts read for it (finding 2.3)
    assert q.needs_facts(q.tree_waits(hk_run()[0][-1], X86))  # a non-main sleeper: read


def test_a_thread_withdrawn_after_the_dump_is_never_excused_again() -> None:
    snaps, io = hk_run()
    history = [q.judge(s, X86, None, [], i)[1] for s, i in zip(snaps, io, strict=True)]
    waits, _ = q.judge(snaps[-1], X86, None, history[:-1], io[-1], withdrawn={(10, 12)})
    assert not any(tw.kind == q.HOUSEKEEPING for tw, _ in waits) and not q.is_blocked(waits)
    assert not q.needs_facts(waits, {(10, 12)})


def test_idle_marks_only_a_sleep_on_a_timer_of_its_own() -> None:
    p = proc(10, 1, th(10), sleeper(11), th(12, args=(0x1000, 9 | 128, 0, 0x7FFD, 0, 0)))
    idle = {tw.tid: tw.idle for tw, _ in q.tree_waits(snap(0, p), X86)}
    assert idle == {10: False, 11: True, 12: True}  # untimed futex; nanosleep; timed futex
    # a process catching SIGALRM: its untimed futex wait turns timed but is not idle (a
    # deadlock there is no sleep); its nanosleep is still a sleep on its own timer
    facts = q.TreeFacts(signalled={(10, 10): "catches SIGALRM"})
    waits = q.tree_waits(snap(0, p), X86, facts)
    got = {tw.tid: (tw.kind, tw.idle) for tw, _ in waits}
    assert got == {10: (q.TIMED, False), 11: (q.TIMED, True), 12: (q.TIMED, True)}
    # and such a made-timed wait is no housekeeping candidate either
    assert not any(w.idle for tw, w in waits if tw.tid == 10)


def test_a_timed_futex_wait_first_seen_restarted_is_that_futex_wait() -> None:
    """A timed futex wait interrupted before any look saw it (a tracer's attach, a signal)
    resumes as restart_syscall with the original argument registers, asleep in the futex
    wait code: it is judged as that futex wait (its deadline then read from its timeout),
    not as an unknown timed restart; elsewhere a restart first seen stays restart_syscall."""
    timed = (0x1000, FUTEX_WAIT_BITSET_REALTIME_PRIVATE, 0, 0x7FFD, 0, 0xFFFFFFFF)
    first = snap(0, proc(10, 1, th(10, nr=RESTART, args=timed)))
    judged, calls, restarted = q.continued(first, X86, {})
    assert restarted == {(10, 10)} and judged.processes[0].threads[0].syscall == "202"
    assert calls[(10, 10)][0] == "202"
    w = q.tree_waits(judged, X86, None, restarted)[0][1]
    assert w.kind == q.TIMED and w.what.startswith("futex wait with a timeout")
    elsewhere = replace(th(10, nr=RESTART, args=timed), wchan="do_sys_poll")
    _, _, restarted = q.continued(snap(0, proc(10, 1, elsewhere)), X86, {})
    assert restarted == set()
