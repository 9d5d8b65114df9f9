"""Two workers on the two ends of a multiprocessing.Pipe() both recv() first, while their
parent keeps polling them with join(timeout=1) and logging.

Source: the multiprocessing docs, Connection.recv ("Blocks until there is something to
receive", https://docs.python.org/3/library/multiprocessing.html#multiprocessing.connection.Connection.recv);
the pitfall as met in practice: "If both processes are trying to read simultaneously
without ensuring the other process has written data, they can both get stuck, leading to a
deadlock" ("Avoiding Deadlocks with multiprocessing.Pipe()",
https://runebook.dev/en/docs/python/library/multiprocessing/multiprocessing.Pipe); the same
protocol bug on TCP: "A trivial example of a deadlock is if both the client and server call
recv() immediately after the connection is established" (Van Winkle, Hands-On Network
Programming with C, https://www.oreilly.com/library/view/hands-on-network-programming/9781789349863/).
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux); Pipe() is duplex, so its
two ends are a socketpair(AF_UNIX, SOCK_STREAM).
Hang: each worker waits in Connection.recv (read on its end of the socketpair) for the
other's hello; the parent has closed both ends, so only the two workers can wake each
other. A PARTIAL deadlock: the parent keeps running, polling join(timeout=1) and printing
"waiting for [...]" every second, forever.
Run: python wg_pipe_both_recv.py
"""

import multiprocessing as mp
from multiprocessing.connection import Connection


def peer(name: str, conn: Connection) -> None:
    hello = conn.recv()  # the bug: both sides wait for the other to speak first
    conn.send(f"{name} got {hello}")


if __name__ == "__main__":
    left, right = mp.Pipe()  # duplex: a unix socketpair
    workers = [
        mp.Process(target=peer, args=("left", left), name="left"),
        mp.Process(target=peer, args=("right", right), name="right"),
    ]
    for w in workers:
        w.start()
    left.close()
    right.close()  # the parent keeps no end: only the workers hold the pair
    print("running", flush=True)
    while any(w.is_alive() for w in workers):
        for w in workers:
            w.join(timeout=1)
        print("waiting for", [w.name for w in workers if w.is_alive()], flush=True)
    print("done", flush=True)
