"""A look-alike of tw_filelock_two_instances.py: the same inner FileLock retry loop on a
lock file, but the outer lock is held by a worker thread that lets it go after 7 s: the
retry succeeds and the program exits 0.

Source: tox-dev/filelock#315 (the same two objects on one path, in two threads: the
locking works as meant); filelock docs, "Tutorial" (a lock held by one thread, waited for
by another).
Versions: CPython 3.11.7, filelock 4.3.2.
Run: python ok_tw_filelock_released.py
"""

import os
import tempfile
import threading
import time

import filelock

LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-filelock-ok-{os.getpid()}.lock"),
)


def hold(taken: threading.Event) -> None:
    with filelock.FileLock(LOCK):
        taken.set()
        time.sleep(7)  # a long refresh, then the lock goes


if __name__ == "__main__":
    print("running", flush=True)
    taken = threading.Event()
    worker = threading.Thread(target=hold, args=(taken,))
    worker.start()
    taken.wait()
    with filelock.FileLock(LOCK).acquire(timeout=600):
        print("reindexed", flush=True)
    worker.join()
