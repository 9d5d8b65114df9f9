"""The healthy look-alike of py_fork_thread_pool.py: fork() first, while the process has one
thread, then a thread pool in the parent (and one of its own in the child). Both finish."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor


def square(i: int) -> int:
    return i * i


def main() -> int:
    pid = os.fork()
    with ThreadPoolExecutor(max_workers=2) as pool:
        total = sum(pool.map(square, range(8)))
    if pid == 0:
        print(f"child: {total}", flush=True)
        os._exit(0)
    print(f"parent: {total}", flush=True)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
