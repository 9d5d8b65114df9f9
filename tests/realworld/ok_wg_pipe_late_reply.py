"""HEALTHY look-alike of wg_pipe_both_recv.py: a parent waits in recv() on a
multiprocessing.Pipe() whose other end replies after 8 s.

Source: the multiprocessing docs, Pipe and Connection.recv
(https://docs.python.org/3/library/multiprocessing.html#multiprocessing.Pipe).
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux); Pipe() is a socketpair.
Looks like a hang: for 8 s the parent waits in read() on its end of the socketpair and the
worker sleeps; no CPU, no output.
Ends: the worker sends its reply and exits; exit 0.
Run: python ok_wg_pipe_late_reply.py
"""

import multiprocessing as mp
import time
from multiprocessing.connection import Connection


def worker(conn: Connection) -> None:
    job = conn.recv()
    time.sleep(8)  # a slow remote call
    conn.send(f"done: {job}")


if __name__ == "__main__":
    here, there = mp.Pipe()
    p = mp.Process(target=worker, args=(there,))
    p.start()
    there.close()
    here.send("job 1")
    print("running", flush=True)
    print(here.recv(), flush=True)
    p.join()
