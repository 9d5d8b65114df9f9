"""multiprocessing.Pool.map never returns after one of its workers is SIGKILLed.

Source: python/cpython#96062 "multiprocessing.Pool gets stuck indefinitely when the child
process is killed manually" (https://github.com/python/cpython/issues/96062), and the older
bpo-22393 (python/cpython#66587) it cites: the OOM killer's shape, reported downstream in
mapillary/OpenSfM#190 and huggingface/datasets#5976.
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Hang: the worker that took task 0 dies by SIGKILL; the Pool starts a replacement worker,
but the task it held is lost, so Pool.map in the main thread waits forever in
AsyncResult.wait (a Condition wait), no CPU, no output after "mapping".
Run: python pool_sigkill.py
"""

import multiprocessing as mp
import os
import signal
import time


def work(i: int) -> int:
    if i == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a worker
    time.sleep(0.05)
    return i * i


if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        print("mapping", flush=True)
        print(pool.map(work, range(4)), flush=True)
