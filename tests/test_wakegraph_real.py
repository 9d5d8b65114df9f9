"""The wake graph on real processes: `harness attach` on a group leader whose daemon left
the tree (the harness is no subreaper there) follows the group, gives the closed-set
verdict with the daemon at the chain's end, and --kill ends the daemon too."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.vocab import Trigger, WakeEnd
from tests.harness_cli import harness, samples_of

pytestmark = pytest.mark.timeout(90)

# the job reads a pipe whose only writer is a daemon it double-forked (so the daemon is no
# descendant of the job) and which waits forever on an Event nobody sets
DAEMON_HOLDS_PIPE = """
import os, sys, threading
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        os.close(r)
        print(os.getpid(), flush=True)
        threading.Event().wait()
    os._exit(0)
os.close(w)
os.wait()
os.read(r, 1)
"""


def test_attach_follows_a_daemon_that_left_the_tree_but_not_the_group(tmp_path: Path) -> None:
    job = subprocess.Popen(
        [sys.executable, "-c", DAEMON_HOLDS_PIPE],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the job leads its own process group, as a shell's job
    )
    daemon = 0
    try:
        assert job.stdout is not None
        daemon = int(job.stdout.readline())
        assert psutil.Process(daemon).ppid() != job.pid  # orphaned: not in the job's tree
        deadline = time.monotonic() + 10
        while psutil.Process(job.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)  # the intermediate child has exited and been reaped
        argv = ["attach", str(job.pid), "--kill", "--report-dir", str(tmp_path)]
        res = harness(*argv, report_root=tmp_path, timeout=60)
        report = res.loaded
        assert (res.code, report.trigger) == (2, Trigger.CLOSED), res.stdout + res.stderr
        wake = samples_of(report).wake
        assert wake is not None, report.samples
        assert [daemon, daemon] in wake.closed and [job.pid, job.pid] in wake.closed
        assert wake.end is WakeEnd.NOBODY and wake.end_pid == daemon, wake
        assert "no longer in its tree" in wake.links[-1].note, wake
        job.wait(timeout=10)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)  # init reaps it
        gone = not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
        assert gone, "--kill left the daemon running"
    finally:
        for pid in (job.pid, daemon):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        job.wait(timeout=10)


# a dispatcher thread raises after a moment of work; main waits for results, the worker for
# tasks only the dispatcher would have put: a cycle the dead thread left behind (the shape
# of tilezen/tilequeue#131 with a second waiter)
DEAD_DISPATCHER = """
import queue, threading, time
tasks, results = queue.Queue(), queue.Queue()
def dispatch():
    time.sleep(0.6)  # reads the job list
    raise ValueError("bad job spec")
def work():
    while True:
        results.put(tasks.get() * 2)
threading.Thread(target=dispatch, name="dispatcher").start()
threading.Thread(target=work, name="worker", daemon=True).start()
print("running", flush=True)
print(results.get())
"""


def test_a_cycle_left_by_a_thread_that_died_ends_at_its_death(tmp_path: Path) -> None:
    """The threads wait for each other, but the reason is the dispatcher that died (its
    traceback in the output, its exit seen by the watch): the chain ends `dead`, not at
    the cycle, and the cause says so."""
    from tests.harness_cli import verdict_of, watch_cmd, watch_opts

    argv = (sys.executable, "-c", DEAD_DISPATCHER)
    report = watch_cmd(tmp_path / "r", *argv, opts=watch_opts(timeout=60)).loaded
    v = verdict_of(report)
    wake = samples_of(report).wake
    assert report.trigger is Trigger.CLOSED, v.summary
    assert wake is not None and wake.end is WakeEnd.DEAD, wake
    assert wake.lost and "they wait for each other, after a thread of theirs died" in wake.end_what
    assert "dispatcher: ValueError: bad job spec" in wake.end_what
    assert [c.id for c in v.causes] == ["dead-waker"], [c.sentence for c in v.causes]
