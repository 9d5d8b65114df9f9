"""A multiprocessing.Pool loses a worker while map waits for its results: the worker is
SIGKILLed mid-task (what the OOM killer does), the pool starts a replacement, but the task
the dead worker held is never finished, so Pool.map never returns (CPython issues about
Pool.map hanging when a worker is killed, e.g. python/cpython#66587 / bpo-22393). With `slow`
as argument no worker dies, the tasks only take a while: the healthy look-alike."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time


def task(i: int) -> int:
    time.sleep(0.2)
    if i == 3 and sys.argv[1:] != ["slow"]:
        os.kill(os.getpid(), signal.SIGKILL)
    return i * i


def main() -> int:
    with mp.get_context("fork").Pool(2) as pool:
        print("pool started", flush=True)
        results = pool.map(task, range(8), chunksize=1)
    print(f"sum {sum(results)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
