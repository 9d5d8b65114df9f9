"""HEALTHY look-alike of wg_pipe_both_recv.py: a parent waits in recv() on a Pipe while its
worker computes, with the CPU busy, for 9 s before it answers.

Source: the multiprocessing docs, Pipe and Connection.recv
(https://docs.python.org/3/library/multiprocessing.html#multiprocessing.Pipe).
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux).
Looks like a hang: for 9 s the parent waits in read() on a socketpair with no output.
Ends: the worker sends its sum and exits; exit 0.
Run: python ok_wg_busy_child.py
"""

import multiprocessing as mp
import time
from multiprocessing.connection import Connection


def crunch(conn: Connection) -> None:
    end, total, n = time.monotonic() + 9, 0, 0
    while time.monotonic() < end:
        total += sum(range(n % 1000))
        n += 1
    conn.send(total)


if __name__ == "__main__":
    here, there = mp.Pipe()
    p = mp.Process(target=crunch, args=(there,))
    p.start()
    there.close()
    print("running", flush=True)
    print("total", here.recv(), flush=True)
    p.join()
