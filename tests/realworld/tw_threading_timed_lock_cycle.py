"""Two background jobs take the store lock and the database lock in opposite orders, each
second acquire "protected" by timeout=600: a lock-order deadlock that lasts ten minutes.

Source: r-spade/ormah#207 ("Deadlock: lock-order inversion in IndexBuilder.
incremental_update": the index sweep holds Database._lock (L_db) and calls FileStore
helpers that take the restore-exclusion RLock (L_mem), while every background job takes
L_mem then L_db; "Opposite acquisition orders on two locks form a deadlock cycle"; every
write "hangs forever"); magfest/ubersystem#2349 ("When acquiring the RLock, we should have a
reasonable timeout ... This won't prevent deadlocks, but it will provide better
visibility").
Versions: CPython 3.11.7, stdlib threading.
Hang: a barrier makes both jobs hold their first lock before either asks for its second;
index_sweep holds L_db and waits in RLock.acquire(timeout=600) for L_mem, auto_linker holds
L_mem and waits in Lock.acquire(timeout=600) for L_db (futex waits, private, with a
timeout); main waits in join(timeout=3600). Each lock's holder is the other waiter. No
CPU, no output after "running" for ten minutes (then a TimeoutError in each job).
Run: python tw_threading_timed_lock_cycle.py
"""

import threading
from contextlib import contextmanager

mem_lock = threading.RLock()  # L_mem: restore exclusion, also taken by FileStore helpers
db_lock = threading.Lock()  # L_db: the write transaction
both_hold = threading.Barrier(2)


@contextmanager
def locked(lock, name: str):
    if not lock.acquire(timeout=600):  # "protected" against deadlocks
        raise TimeoutError(f"{name} not acquired in 600 s")
    try:
        yield
    finally:
        lock.release()


def index_sweep() -> None:
    with locked(db_lock, "L_db"):  # opens the write transaction
        both_hold.wait()
        with locked(mem_lock, "L_mem"):  # file_store.list_paths()
            pass


def auto_linker() -> None:
    with locked(mem_lock, "L_mem"):  # @serialized_memory_job
        both_hold.wait()
        with locked(db_lock, "L_db"):  # writes its links
            pass


if __name__ == "__main__":
    print("running", flush=True)
    jobs = [threading.Thread(target=f, name=f.__name__) for f in (index_sweep, auto_linker)]
    for t in jobs:
        t.start()
    for t in jobs:
        t.join(timeout=3600)
    print("jobs done", flush=True)
