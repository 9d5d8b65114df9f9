"""HEALTHY look-alike of tw_mp_barrier_parties.py: the same 3-party
multiprocessing.Barrier(timeout=600); worker 1 takes 7 s to load its shard, then arrives.

Source: the docs, threading.Barrier (https://docs.python.org/3/library/
threading.html#barrier-objects): wait() returns once all parties have called it.
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Looks like a hang: for 7 s the parent and worker 0 wait in Barrier.wait() (futex waits on
the shared semaphore, with a timeout) while worker 1 sleeps; no CPU, no output.
Ends: worker 1 arrives, the barrier opens, the workers exit; exit 0.
Run: python ok_tw_mp_barrier_late.py
"""

import multiprocessing as mp
import time

NUM_WORKERS = 2


def load_shard(rank: int) -> list[int]:
    if rank == 1:
        time.sleep(7)  # a slow network filesystem
    return list(range(rank, 100, NUM_WORKERS))


def worker(rank: int, barrier) -> None:
    shard = load_shard(rank)
    barrier.wait()  # stage start: every worker and the parent
    sum(shard)


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(parties=NUM_WORKERS + 1, timeout=600)
    print("running", flush=True)
    procs = [ctx.Process(target=worker, args=(r, barrier)) for r in range(NUM_WORKERS)]
    for p in procs:
        p.start()
    barrier.wait()  # the parent is the third party
    for p in procs:
        p.join()
    print("stage done", flush=True)
