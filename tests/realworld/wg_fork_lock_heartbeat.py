"""A worker process forked while another thread of the parent holds a lock: the worker
waits for that lock forever, while the parent keeps its heartbeat thread logging and its
main thread polling join(timeout=1).

Source: dask/dask#3759 ("if it acquires a lock and a fork happens immediately after that,
the lock will be acquired in the subprocess and *never released*"); python/cpython#84559
("multiprocessing's default posix start method of 'fork' is broken", the default changed in
3.14); OpenHands/benchmarks#459 (all 30 forked workers "stuck in futex_wait_queue state
for 9+ hours" while the job itself kept running); the os.fork docs on threads
(https://docs.python.org/3/library/os.html#os.fork).
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux) and threading.
Hang: the cache refresher holds the cache's lock at the fork (an Event orders it); the
child's copy of the lock is locked with no thread left to release it, and the worker waits
for it in a futex wait with no timeout, its only thread. A PARTIAL deadlock: the parent
keeps printing a heartbeat every 0.5 s and "waiting for the worker" every second, forever.
Run: python wg_fork_lock_heartbeat.py
"""

import multiprocessing as mp
import threading
import time

cache_lock = threading.Lock()
cache: dict[str, int] = {}


def refresh(holding: threading.Event, forked: threading.Event) -> None:
    with cache_lock:  # a refresh in progress at the moment of the fork
        holding.set()
        forked.wait()
        cache["rows"] = 100


def work() -> None:
    with cache_lock:  # copied locked, its holder not copied
        print("worker: rows", cache.get("rows"), flush=True)


def heartbeat() -> None:
    beat = 0
    while True:
        beat += 1
        print(f"heartbeat {beat}", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    holding, forked = threading.Event(), threading.Event()
    threading.Thread(target=refresh, args=(holding, forked), name="refresh").start()
    holding.wait()
    worker = mp.get_context("fork").Process(target=work, name="worker")
    worker.start()
    forked.set()  # the parent's refresh ends; the worker's copy of the lock stays held
    print("running", flush=True)
    while worker.is_alive():
        worker.join(timeout=1)
        print("waiting for the worker", flush=True)
