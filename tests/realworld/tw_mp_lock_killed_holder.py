"""A worker process is SIGKILLed (the OOM killer) while it holds a multiprocessing.Lock; the
parent's lock.acquire(timeout=600) waits for a release that can never come.

Source: birdnet-team/birdnet#73 ("A worker killed mid-batch deadlocks the survivors": a
multiprocessing.Lock "is a semaphore ... A semaphore has no owner ... If the process holding
the lock is killed — SIGKILL from the OOM killer, a native crash — it is never posted, and
every other process waiting on it blocks forever"); python/cpython#88304 (bpo-44138,
"multiprocessing documentation should note behavior when process with Lock dies"); the
docs' warning on Process.terminate: a process that holds a lock "is liable to cause other
processes to deadlock" (https://docs.python.org/3/library/multiprocessing.html).
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux; the Lock is a
POSIX named semaphore, mapped from a /dev/shm/sem.* file, unlinked).
Hang: the writer takes the lock, works on its batch for half a second and dies by SIGKILL
inside it (a zombie: the parent has not joined it yet); the parent waits in
lock.acquire(timeout=600): sem_timedwait, a futex wait on the shared semaphore's mapping,
with a timeout. Only the dead writer could post it. One live process, one thread; no CPU,
no output after "running".
Run: python tw_mp_lock_killed_holder.py
"""

import multiprocessing as mp
import os
import signal
import time


def write_batch(lock, rows) -> None:
    with lock:  # guards the shared row count (and the table it counts)
        rows.value += 500
        time.sleep(0.5)  # the rest of the batch
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does mid-batch
        rows.value += 500


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    rows = ctx.RawValue("i", 0)
    print("running", flush=True)
    writer = ctx.Process(target=write_batch, args=(lock, rows), name="writer")
    writer.start()
    time.sleep(0.1)  # the writer is inside its batch
    if lock.acquire(timeout=600):  # never: the writer dies holding it
        print("rows written:", rows.value, flush=True)
        lock.release()
    writer.join()
