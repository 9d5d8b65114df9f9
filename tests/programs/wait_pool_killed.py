"""`multiprocessing.Pool.map` whose worker is SIGKILLed mid-task (the OOM killer's shape):
the pool starts a replacement worker, but the task the dead worker held is never re-run and
`map` never returns (CPython issues about Pool hanging when a worker is killed, e.g.
python/cpython#66587 "multiprocessing.Pool hangs if a worker is killed").
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time


def work(x: int) -> int:
    if x == 3:
        time.sleep(1.0)  # killed mid-task, as the OOM killer would, after a while
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
    return x * x


def main() -> None:
    with mp.get_context("fork").Pool(2) as pool:
        print("mapping", flush=True)
        print(sum(pool.map(work, range(8))))


if __name__ == "__main__":
    main()
