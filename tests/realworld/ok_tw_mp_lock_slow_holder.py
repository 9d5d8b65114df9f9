"""HEALTHY look-alike of tw_mp_lock_killed_holder.py: the writer holds the
multiprocessing.Lock for 7 s, then releases it; the parent's acquire(timeout=600) returns.

Source: the docs, multiprocessing.Lock.acquire (https://docs.python.org/3/library/
multiprocessing.html#multiprocessing.Lock.acquire): blocks until the lock is released.
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Looks like a hang: for 7 s the parent waits in lock.acquire(timeout=600) (a futex wait on
the shared semaphore, with a timeout) while the writer, alive, sleeps holding the lock; no
CPU, no output.
Ends: the writer releases the lock and exits; the parent reads the row count; exit 0.
Run: python ok_tw_mp_lock_slow_holder.py
"""

import multiprocessing as mp
import time


def write_batch(lock, holding, rows) -> None:
    with lock:  # guards the shared row count (and the table it counts)
        holding.set()
        rows.value += 500
        time.sleep(7)  # a slow batch
        rows.value += 500


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    holding = ctx.Event()
    rows = ctx.RawValue("i", 0)
    print("running", flush=True)
    writer = ctx.Process(target=write_batch, args=(lock, holding, rows), name="writer")
    writer.start()
    holding.wait(timeout=60)
    if lock.acquire(timeout=600):
        print("rows written:", rows.value, flush=True)
        lock.release()
    writer.join()
