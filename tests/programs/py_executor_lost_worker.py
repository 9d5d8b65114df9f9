"""A concurrent.futures.ProcessPoolExecutor loses its only worker while the caller waits for
results: with max_tasks_per_child=2 the worker exits after two tasks and no replacement is
started, so the third Future.result() waits forever (python/cpython#115634, Python 3.11 to
3.14; fixed by python/cpython#140900). With `plain` as argument the pool has no task limit:
the healthy look-alike, which finishes."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor


def main() -> int:
    limit = None if sys.argv[1:] == ["plain"] else 2
    ctx = mp.get_context("spawn")  # max_tasks_per_child refuses fork
    with ProcessPoolExecutor(1, mp_context=ctx, max_tasks_per_child=limit) as exe:
        futures = [exe.submit(os.getpid) for _ in range(10)]
        for fut in futures:
            print(fut.result(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
