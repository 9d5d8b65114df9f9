"""HEALTHY look-alike of pool_sigkill.py: a Pool whose tasks are slow and silent.

Source: the same Pool.map pattern as python/cpython#96062, with every worker alive.
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Looks like a hang: for about 7 s nothing is printed, the main thread waits in Pool.map,
the workers sleep (an I/O wait's shape), the Pool's handler threads wake on their timers.
Ends: exit 0 after printing the results.
Run: python ok_pool_slow_tasks.py
"""

import multiprocessing as mp
import time


def work(i: int) -> int:
    time.sleep(3.5)  # a slow download, a slow disk
    return i * i


if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        print("mapping", flush=True)
        print(pool.map(work, range(4)), flush=True)
