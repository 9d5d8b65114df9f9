"""HEALTHY look-alike of mp_queue_join.py: get() before join(), as the guidelines say.

Source: the multiprocessing programming guidelines, "Joining processes that use queues"
(https://docs.python.org/3/library/multiprocessing.html#multiprocessing-programming).
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux).
Looks like a hang: the parent blocks in Queue.get (a read on the queue's pipe) for about
7 s while the child computes silently (it sleeps in this model), then puts 1 MB.
Ends: exit 0 after printing the size.
Run: python ok_mp_queue_drain.py
"""

import multiprocessing as mp
import time
from multiprocessing.queues import Queue


def produce(q: "Queue[bytes]") -> None:
    time.sleep(7)
    q.put(b"x" * (1 << 20))


if __name__ == "__main__":
    mp.set_start_method("fork")
    q: "Queue[bytes]" = mp.Queue()
    p = mp.Process(target=produce, args=(q,))
    p.start()
    print("waiting for the result", flush=True)
    data = q.get()  # drain first
    p.join()
    print(len(data), p.exitcode, flush=True)
