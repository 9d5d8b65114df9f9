"""A `ThreadPoolExecutor` used in a fork()ed child after the parent ran a task on it (the
hazard of HKUDS/LightRAG#3860 and rohanpm/more-executors#140): fork copies only the calling
thread, so the child's executor keeps a worker that does not exist and its
`Future.result()` waits forever; the parent waits in `Process.join`. The hang sits in the
child's `child` (its `Future.result`), not in the parent's join.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=1)  # a process-wide pool, as libraries keep one


def lookup(key: str) -> str:
    return key.upper()


def child() -> None:
    print("child:", POOL.submit(lookup, "child").result(), flush=True)


def main() -> None:
    print("parent:", POOL.submit(lookup, "parent").result(), flush=True)
    p = mp.get_context("fork").Process(target=child, name="forked")
    p.start()
    print(f"forked {p.pid}", flush=True)
    p.join()


if __name__ == "__main__":
    main()
