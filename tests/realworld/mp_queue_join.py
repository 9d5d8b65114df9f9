"""Process.join() before draining the multiprocessing.Queue the child put into.

Source: the multiprocessing programming guidelines, "Joining processes that use queues"
(https://docs.python.org/3/library/multiprocessing.html#multiprocessing-programming): a
process that has put items on a queue waits before terminating until the buffered items
are fed to the pipe, so joining it before the items are consumed may deadlock; reported
as python/cpython#91594.
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Hang: the child's QueueFeederThread blocks in write() on the queue's full pipe; the child's
main thread waits for the feeder at exit (Queue._finalize_join); the parent blocks in
Process.join (wait4) and never calls get(). No CPU, no output after "joining".
Run: python mp_queue_join.py
"""

import multiprocessing as mp
from multiprocessing.queues import Queue


def produce(q: "Queue[bytes]") -> None:
    q.put(b"x" * (1 << 20))  # one result larger than the pipe's 64 KiB


if __name__ == "__main__":
    mp.set_start_method("fork")
    q: "Queue[bytes]" = mp.Queue()
    p = mp.Process(target=produce, args=(q,))
    p.start()
    print("joining", flush=True)
    p.join()  # the pitfall: get() first
    print(len(q.get()), flush=True)
