"""HEALTHY look-alike of wg_fifo_open_order.py: a reader blocks in open() on a FIFO whose
writer opens it 8 s later.

Source: fifo(7): "Normally, opening the FIFO blocks until the other end is opened also"
(https://man7.org/linux/man-pages/man7/fifo.7.html).
Versions: CPython 3.11.7, stdlib os.mkfifo and multiprocessing (fork, Linux).
Looks like a hang: for 8 s the reader waits in openat() on the FIFO and the writer process
sleeps; no CPU, no output.
Ends: the writer opens the FIFO, writes a line and closes it, the reader reads it; exit 0.
Run: python ok_wg_fifo_late_writer.py
"""

import multiprocessing as mp
import os
import shutil
import tempfile
import time

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
DIR = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-wg-fifo-{os.getpid()}"),
)
FIFO = os.path.join(DIR, "events.fifo")


def late_writer() -> None:
    time.sleep(8)
    with open(FIFO, "wb") as f:
        f.write(b"started\n")


if __name__ == "__main__":
    shutil.rmtree(DIR, ignore_errors=True)
    os.makedirs(DIR)
    os.mkfifo(FIFO)
    p = mp.Process(target=late_writer)
    p.start()
    print("running", flush=True)
    with open(FIFO, "rb") as f:
        print("got", f.read(), flush=True)
    p.join()
    shutil.rmtree(DIR)
