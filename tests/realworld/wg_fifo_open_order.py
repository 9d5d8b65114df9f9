"""Client and server open their two FIFOs (named pipes) in opposite orders: both block in
open() for good.

Source: hwangsaeul/hwangsae#62 ("test-streamer: fix deadlock": "In the opposite order, the
pipeline's open(), which is a blocking call, would block until the FIFO gets opened for
reading, preventing the transmit to do just that"); fifo(7): "Normally, opening the FIFO
blocks until the other end is opened also" (https://man7.org/linux/man-pages/man7/fifo.7.html);
beave/sagan#16 (a FIFO opened before the fork hangs the init script).
Versions: CPython 3.11.7, stdlib os.mkfifo and multiprocessing (fork, Linux).
Hang: the server opens requests.fifo for reading first (it blocks until a writer opens it);
the client opens replies.fifo for reading first (it blocks until a writer opens it); each
would open the other's FIFO for writing next. Both wait in openat(). Anyone who can reach
the paths could still open them: not provably a deadlock from inside. No CPU, no output
after "running".
Run: python wg_fifo_open_order.py
"""

import multiprocessing as mp
import os
import shutil
import tempfile

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
DIR = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-wg-fifo-open-order-{os.getpid()}"),
)
REQUESTS, REPLIES = os.path.join(DIR, "requests.fifo"), os.path.join(DIR, "replies.fifo")


def server() -> None:
    with open(REQUESTS, "rb") as requests, open(REPLIES, "wb") as replies:
        for line in requests:
            replies.write(b"ok " + line)


def client() -> None:
    with open(REPLIES, "rb") as replies, open(REQUESTS, "wb") as requests:  # the bug
        requests.write(b"status\n")
        requests.close()
        print(replies.read().decode(), flush=True)


if __name__ == "__main__":
    shutil.rmtree(DIR, ignore_errors=True)
    os.makedirs(DIR)
    os.mkfifo(REQUESTS)
    os.mkfifo(REPLIES)
    p = mp.Process(target=server, name="server")
    p.start()
    print("running", flush=True)
    client()
    p.join()
