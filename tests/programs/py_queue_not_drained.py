"""A parent joins a multiprocessing.Process before draining the Queue it filled: the child's
queue feeder thread blocks writing the queue's pipe (the item is bigger than the pipe), the
child's main thread waits at exit for that feeder, and the parent's join waits for the
child. The CPython programming guidelines, "Joining processes that use queues". With `drain`
as argument the parent gets the item first: the healthy look-alike, which finishes."""

from __future__ import annotations

import multiprocessing as mp
import sys


def produce(q: mp.Queue) -> None:  # type: ignore[type-arg]
    q.put("x" * 1_000_000)  # far more than a pipe holds


def main() -> int:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=produce, args=(q,))
    p.start()
    print(f"child {p.pid} started", flush=True)
    if sys.argv[1:] == ["drain"]:
        item = q.get()
        print(f"got {len(item)} bytes", flush=True)
    p.join()  # without draining first: deadlocks
    return p.exitcode or 0


if __name__ == "__main__":
    sys.exit(main())
