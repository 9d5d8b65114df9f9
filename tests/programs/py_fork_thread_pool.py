"""A ThreadPoolExecutor used in a fork()ed child: the parent's pool started its worker
threads before the fork; the child inherits the executor's bookkeeping (its threads are
counted as started) but none of the threads, so a task submitted in the child is never run
and the child's Future.result() waits forever, while the parent waits for the child.
(CPython: fork() copies only the calling thread; concurrent.futures, "ThreadPoolExecutor ...
not fork safe", python/cpython#84559, #90622.) With `own` as argument the child makes its own
pool: the healthy look-alike, which finishes."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=2)


def square(i: int) -> int:
    return i * i


def main() -> int:
    # the parent's pool starts both its workers
    print(sum(POOL.map(square, range(8))), flush=True)
    pid = os.fork()
    if pid == 0:
        if sys.argv[1:] == ["own"]:
            with ThreadPoolExecutor(max_workers=2) as own:
                print(f"child: {own.submit(square, 7).result()}", flush=True)
        else:
            print(f"child: {POOL.submit(square, 7).result()}", flush=True)  # never runs
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    POOL.shutdown()
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
