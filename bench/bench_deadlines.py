"""The watcher's cost of deadlines and poll tracing (docs/quiescence.md, "Deadlines",
"Polling loops") on healthy programs shaped to reach them, side by side with the same watch
loop without them (no wall limit: no deadline is read; polling loops never traced), in one
go. Each program runs for `--seconds` under an in-process WatchLoop at the default cadence;
the figure is the watch loop's own CPU time per look and as a share of one core, and the
traces taken.

    .venv/bin/python bench/bench_deadlines.py [--seconds 8] [--repeat 3]

Programs (healthy: nothing here ever hangs):
- sleepers: a main thread in a `time.sleep(0.05)` loop beside 16 threads on a Condition
  (the loop is traced once, then never again: it polls no lock);
- timed-waiters: 32 threads in `Event.wait(timeout=600)` beside a busy main thread (the
  deadlines are never read: something runs);
- pool-idle: a multiprocessing Pool of 4 idle workers (shared semaphores) while the main
  thread sleeps in a loop (shared mappings resolved, the host's maps scanned);
- retry-lock: a main thread retrying a file lock another process holds for the whole run
  (flock LOCK_NB every 50 ms), the holder asleep (traced, resolved, never closed: the
  holder's sleep ends before the limit);
- gil-wait: a thread that needs Python while the main thread holds the GIL in 2 s native
  sleeps (ctypes.PyDLL), over and over (the waiter's retry read as the GIL, by py-spy, at
  most 3 times: the holder's sleep ends before the limit, nothing closes).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.watch import pollloops
from harness.watch.watchloop import WatchLoop

PROGRAMS = {
    "sleepers": """
import threading, time
c = threading.Condition()
def idle():
    with c:
        c.wait()
for _ in range(16):
    threading.Thread(target=idle, daemon=True).start()
print("ready", flush=True)
while True:
    time.sleep(0.05)
""",
    "timed-waiters": """
import threading, time
for _ in range(32):
    threading.Thread(target=threading.Event().wait, args=(600,), daemon=True).start()
print("ready", flush=True)
while True:
    sum(range(10000))
""",
    "pool-idle": """
import multiprocessing as mp, time
if __name__ == "__main__":
    pool = mp.get_context("fork").Pool(4)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
""",
    "retry-lock": """
import fcntl, os, subprocess, sys, time
path = sys.argv[1]
holder = subprocess.Popen([sys.executable, "-c",
    "import fcntl, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX);"
    " print(1, flush=True); time.sleep(30)", path], stdout=subprocess.PIPE)
holder.stdout.readline()
print("ready", flush=True)
f = open(path, "w")
while True:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        break
    except BlockingIOError:
        time.sleep(0.05)
""",
    "gil-wait": """
import ctypes, threading
with_gil = ctypes.PyDLL(None)
def worker():
    while True:
        sum(range(1000))  # Python: needs the GIL main keeps
threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
while True:
    with_gil.usleep(2_000_000)  # 2 s in native code, the GIL held
""",
}


def measure(name: str, seconds: float, shipped: bool, tmp: Path) -> tuple[float, float, int]:
    """(CPU seconds per look, share of one core, traces and GIL reads) of the watch loop on
    one program, its tools' CPU (strace, py-spy: children reaped) counted in."""
    argv = [sys.executable, "-c", PROGRAMS[name], str(tmp / f"{name}.lock")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline()
    loop = WatchLoop(proc.pid, time.monotonic())
    if shipped:
        loop.limit_at = time.monotonic() + 600  # harness watch's default wall
    else:
        loop.limit_at = None  # no deadline read
        loop._polls.candidates = lambda snap, timed, withdrawn: set()  # type: ignore[method-assign]
    start = time.monotonic()
    before = _children_cpu()
    try:
        while time.monotonic() - start < seconds:
            loop.tick(time.monotonic())
            time.sleep(0.01)
        tracers = _children_cpu() - before
    finally:
        loop.close()
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait()
    wall = time.monotonic() - start
    cpu = loop.cpu_s + tracers
    return cpu / max(1, loop.snapshots), cpu / wall, loop._polls.traces + loop._polls.probes


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--program", action="append", choices=list(PROGRAMS), help="only these")
    args = ap.parse_args()
    assert pollloops.TRACE_S > 0
    print("| program | lane | ms of CPU a look | share of one core | traces + GIL reads |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.program or PROGRAMS:
            for shipped in (False, True):
                runs = [measure(name, args.seconds, shipped, Path(tmp)) for _ in range(args.repeat)]
                per = statistics.median(r[0] for r in runs) * 1000
                share = statistics.median(r[1] for r in runs)
                traces = max(r[2] for r in runs)
                lane = "deadlines + poll tracing" if shipped else "without"
                print(f"| {name} | {lane} | {per:.2f} | {share:.2%} | {traces} |", flush=True)


if __name__ == "__main__":
    main()
