"""A multiprocessing.Barrier(parties=3, timeout=600) for the parent and two workers; one
worker dies of an exception before it arrives, the other two parties wait ten minutes.

Source: kubernetes-sigs/inference-perf#608 (review: a dead worker leaves a stage barrier
"where only num_workers of the required num_workers + 1 parties can arrive, so the parent
blocks forever in a synchronous Barrier.wait() ... A worker dying by exception does the
same"); python/cpython#123899 ("multiprocessing.Barrier does not return if waiting process
is terminated"); the docs, threading.Barrier: parties must all call wait()
(https://docs.python.org/3/library/threading.html#barrier-objects).
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux): the Barrier's
Condition is built on POSIX named semaphores (each a mapped /dev/shm/sem.* file, unlinked),
its state kept in a shared ctypes array in the multiprocessing heap.
Hang: worker 1 raises while loading its shard (the traceback goes to stderr, it exits 1);
the parent and worker 0 wait in Barrier.wait() -> Condition.wait(timeout=600):
sem_timedwait on the Condition's shared wait semaphore (futex on the shared mapping, with
a timeout). Only the third party could release them; it is a zombie, not yet joined. No
CPU, no output after the traceback.
Run: python tw_mp_barrier_parties.py
"""

import multiprocessing as mp

NUM_WORKERS = 2


def load_shard(rank: int) -> list[int]:
    if rank == 1:
        raise FileNotFoundError(f"shard-{rank}.bin")  # a missing input file
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
