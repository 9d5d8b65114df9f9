"""multiprocessing.Pool.map never returns after a worker exits (os._exit) inside a task.

Source: bpo-22393 "multiprocessing.Pool shouldn't hang forever if a worker process dies
unexpectedly" (python/cpython#66587, https://github.com/python/cpython/issues/66587): a
worker that exits without a signal (a C extension calling exit(), os._exit in a task).
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Hang: the worker running task 1 exits with status 3; the Pool replaces it and the task
is lost, so Pool.map waits forever in AsyncResult.wait; no CPU, no output after "mapping".
Run: python pool_worker_exit.py
"""

import multiprocessing as mp
import os
import time


def work(i: int) -> int:
    if i == 1:
        os._exit(3)  # a library giving up on the process, not a signal
    time.sleep(0.05)
    return i * i


if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        print("mapping", flush=True)
        print(pool.map(work, range(4)), flush=True)
