"""Housekeeping threads and pipe writes on real programs (docs/quiescence.md): a deadlock
beside threads that wake on a timer and do nothing, a Pool that lost a worker, and
`Popen(stdout=PIPE).wait()` with a chatty child get the early verdict (trigger quiescent)
long before the 60 s windows; healthy look-alikes (a Pool with slow or CPU-bound tasks, a
pipe reader waiting for a slow live writer, a periodic poll that ends by itself) pass, each
run several times."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.execute.watchloop import WatchLoop
from tests.harness_cli import HarnessResult, harness, tree_is_gone

WINDOWS = ["--startup", "60", "--stall", "60", "--timeout", "90", "--quiescent", "2"]

HEARTBEAT_DEADLOCK = """
import threading, time
a, b = threading.Lock(), threading.Lock()
def one():
    with a:
        time.sleep(0.2)
        with b: pass
def two():
    with b:
        time.sleep(0.2)
        with a: pass
def heartbeat():  # Condition.wait(timeout) in a loop: a timed futex wait
    c = threading.Condition()
    with c:
        while True:
            c.wait(0.1)
def ticker():  # while True: time.sleep(0.1): clock_nanosleep
    while True:
        time.sleep(0.1)
threading.Thread(target=heartbeat, daemon=True).start()
threading.Thread(target=ticker, daemon=True).start()
t1, t2 = threading.Thread(target=one), threading.Thread(target=two)
t1.start(); t2.start(); t1.join(); t2.join()
"""

# CPython's Pool.map never returns when a worker is SIGKILLed (the OOM killer's shape). Its
# worker handler polls the sentinels with no timeout; the stack dump's attach interrupts that
# poll, which resumes as restart_syscall: judged as the poll continued (docs/quiescence.md)
POOL_LOST_WORKER = """
import multiprocessing as mp, os, signal, time
def f(x):
    if x == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(p.map(f, range(4)))
"""

# the subprocess docs' warning: Popen.wait() with stdout=PIPE and a chatty child
POPEN_CHATTY = """
import subprocess, sys
child = "import sys\\nwhile True: sys.stdout.write('x' * 4096)"
subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE).wait()
"""

POOL_SLOW_TASKS = """
import multiprocessing as mp, time
def f(x):
    time.sleep(1.5)
    return x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(12))))
"""

POOL_CPU_TASKS = """
import multiprocessing as mp, time
def f(x):
    n, end = 0, time.monotonic() + 1.5  # CPU-bound for 1.5 s of wall time, whatever the load
    while time.monotonic() < end:
        n += 1
    return n
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print(sum(p.map(f, range(12))))
"""

SLOW_WRITER = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    for _ in range(3):
        time.sleep(3)
        os.write(w, b"tick\\n")
    os._exit(0)
os.close(w)
while os.read(r, 100):
    pass
os.wait()
"""

PERIODIC_POLL = """
import threading, time
deadline = time.monotonic() + 9
def poll():
    while time.monotonic() < deadline:
        time.sleep(0.1)
poll()
"""


def watch(tmp_path: Path, code: str) -> HarnessResult:
    script = tmp_path / "prog.py"
    script.write_text(code)
    return harness("watch", *WINDOWS, "--", sys.executable, str(script), report_root=tmp_path / "r")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("code", "housekeeping"),
    [(HEARTBEAT_DEADLOCK, 2), (POPEN_CHATTY, 0)],
    ids=["heartbeat-deadlock", "popen-chatty"],
)
def test_real_hangs_get_the_early_verdict(tmp_path: Path, code: str, housekeeping: int) -> None:
    res = watch(tmp_path, code)
    report = res.report
    v = report["verdict"]
    assert res.code == 2, res.stderr
    assert (report["trigger"], v["kind"], v["mechanism"]) == ("quiescent", "hang", "deadlock")
    # housekeeping is proven over 5 s, then the 2 s window (again, when the tracer's attach
    # interrupted a sleeper and the first confirmation failed): far below the 60 s windows
    assert report["timings"]["run_s"] < 30, report["timings"]
    assert tree_is_gone(report["exit"]["pid"])
    waits = report["samples"]["waits"]
    assert waits and all(w["kind"] in ("tree", "done", "housekeeping") for w in waits), waits
    hk = [w for w in waits if w["kind"] == "housekeeping"]
    assert len(hk) == housekeeping, waits
    for w in hk:  # the evidence names the syscall, the period seen and the CPU
        assert "every ~0.1" in w["what"] and "s of CPU" in w["what"], w
        assert any(f"tid {w['tid']} not counted" in n for n in report["samples"]["notes"])


# a thread in poll(-1) on a pipe only the tree writes, while the main thread joins it: the
# Pool worker handler's shape, in one process
POLL_FOREVER = """
import os, select, threading
r, w = os.pipe()
def handler():
    p = select.poll()
    p.register(r, select.POLLIN)
    p.poll()
t = threading.Thread(target=handler)
t.start()
print("ready", flush=True)
t.join()
"""


def _until_state(pid: int, tid: int, state: str) -> None:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == state:
                return
        time.sleep(0.01)
    raise AssertionError(f"tid {tid} never reached state {state}")


def _quiet_loop(root: subprocess.Popen[bytes], start: float) -> WatchLoop:
    loop = WatchLoop(root.pid, start)
    while loop.quiet_since is None or time.monotonic() - loop.quiet_since < 1.0:
        assert time.monotonic() - start < 15, [w.what for w, _ in loop._waits]
        loop.tick(time.monotonic())
        time.sleep(0.05)
    return loop


@pytest.mark.timeout(60)
def test_an_interrupted_poll_resumed_by_restart_syscall_is_still_on_the_tree() -> None:
    # a real stop and continue interrupts the poll, as a tracer's attach does: the kernel
    # resumes it as restart_syscall with the poll's own arguments
    root = subprocess.Popen([sys.executable, "-c", POLL_FOREVER], stdout=subprocess.PIPE)
    start = time.monotonic()
    try:
        assert root.stdout is not None and root.stdout.readline() == b"ready\n"
        loop = _quiet_loop(root, start)
        tid = next(int(t) for t in os.listdir(f"/proc/{root.pid}/task") if int(t) != root.pid)
        os.kill(root.pid, signal.SIGSTOP)
        _until_state(root.pid, tid, "T")  # a SIGCONT sent before the stop cancels it
        os.kill(root.pid, signal.SIGCONT)
        _until_state(root.pid, tid, "S")
        with open(f"/proc/{root.pid}/task/{tid}/syscall") as f:
            assert f.read().split()[0] == "219" or os.uname().machine != "x86_64"  # restarted
        assert loop.confirm() is None  # the poll continued: nothing moved
        loop.tick(time.monotonic() + 1)
        waits = {w.tid: w for w, _ in loop._waits}
        assert waits[tid].kind == "tree" and "restart_syscall" in waits[tid].what, waits
        assert loop.quiet_since is not None
    finally:
        root.kill()
        root.wait()
    loop.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_that_lost_a_worker_gets_the_early_verdict(tmp_path: Path) -> None:
    res = watch(tmp_path, POOL_LOST_WORKER)
    report = res.report
    assert (report["trigger"], report["verdict"]["mechanism"]) == ("quiescent", "deadlock")
    assert report["timings"]["run_s"] < 20, report["timings"]  # not the 60 s stall window
    notes = report["samples"]["notes"]
    assert not any("not confirmed" in n for n in notes), notes  # the dump's restart forgiven
    polls = [w for w in report["samples"]["waits"] if w["what"].startswith("poll (no timeout)")]
    assert polls and all(w["kind"] == "tree" for w in polls), report["samples"]["waits"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_popen_wait_names_the_pipe_and_its_reader(tmp_path: Path) -> None:
    waits = watch(tmp_path, POPEN_CHATTY).report["samples"]["waits"]
    parent = next(w for w in waits if w["on"].startswith("child:"))
    child = next(w for w in waits if w["pid"] != parent["pid"])
    assert parent["peers"] == [child["pid"]] and parent["on"] == f"child:{child['pid']}"
    assert child["on"].startswith("pipe:[") and child["peers"] == [parent["pid"]]
    assert "write to a full pipe" in child["what"]


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "code",
    [POOL_SLOW_TASKS, POOL_CPU_TASKS, SLOW_WRITER, PERIODIC_POLL],
    ids=["pool-slow-tasks", "pool-cpu-tasks", "slow-writer", "periodic-poll"],
)
def test_healthy_look_alikes_are_never_quiescent(tmp_path: Path, code: str) -> None:
    # once each here (the suite's time); their false-verdict rate over repeated runs, with
    # the corpus's look-alikes, is measured by bench/realworld.py --repeat-healthy N
    res = watch(tmp_path, code)
    report = res.report
    assert (res.code, report["trigger"], report["verdict"]["kind"]) == (0, "exit", "pass"), report[
        "verdict"
    ]
    assert report["timings"]["run_s"] > 5 + 2  # long enough for a false verdict to show
