"""A parent joins a `multiprocessing.Process` before draining the Queue it filled: the
deadlock of the multiprocessing guidelines ("Joining processes that use queues": a process
that has put items on a queue waits before terminating until all the buffered items are fed
by the feeder thread to the underlying pipe). The child's feeder thread blocks writing the
queue's pipe, read only by the parent; the child's main thread joins the feeder at exit;
the parent waits in `Process.join`.
"""

from __future__ import annotations

import multiprocessing as mp


def produce(q: mp.Queue[bytes]) -> None:
    q.put(b"x" * (4 << 20))  # 4 MiB: more than the pipe holds


def main() -> None:
    ctx = mp.get_context("fork")
    q: mp.Queue[bytes] = ctx.Queue()
    p = ctx.Process(target=produce, args=(q,), name="producer")
    p.start()
    print(f"started producer {p.pid}", flush=True)
    p.join()  # before q.get(): the feeder never finishes
    print(len(q.get()))


if __name__ == "__main__":
    main()
