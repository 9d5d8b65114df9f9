"""A ThreadPoolExecutor used in a fork()ed child, after the parent started its thread.

Source: HKUDS/LightRAG#3860 (review thread, reproduced by the maintainer): a process-wide
ThreadPoolExecutor that has run a task is inherited by a fork()ed child without its worker
thread, "so child submissions remain queued forever"; the general hazard:
rohanpm/more-executors#140, h2oai/datatable#1758 ("Fortify the thread pool against
forking").
Versions: CPython 3.11.7, stdlib concurrent.futures and multiprocessing (fork, Linux).
Hang: the child's executor believes its one worker thread is alive (it is not: fork copies
only the calling thread), so Future.result() waits forever in a Condition wait; the parent
waits in Process.join (wait4). No CPU, no output after "forking".
Run: python fork_threadpool.py
"""

import multiprocessing as mp
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=1)  # a library's process-wide pool


def lookup(key: str) -> str:
    return key.upper()


def child() -> None:
    print("child:", POOL.submit(lookup, "child").result(), flush=True)


if __name__ == "__main__":
    print("parent:", POOL.submit(lookup, "parent").result(), flush=True)
    mp.set_start_method("fork")
    p = mp.Process(target=child)
    print("forking", flush=True)
    p.start()
    p.join()
