"""HEALTHY look-alike of wg_stale_lockfile_poll.py: a lock-file lock polled every 50 ms whose
live holder removes the file after 8 s.

Source: the filelock docs, SoftFileLock (https://py-filelock.readthedocs.io/en/latest/
#filelock-vs-softfilelock): acquire() retries every poll_interval until the file is gone.
Versions: CPython 3.11.7, stdlib os and multiprocessing (fork, Linux).
Looks like a hang: for 8 s the main thread sleeps 50 ms at a time around an O_EXCL open that
fails, and the holder sleeps; no output.
Ends: the holder removes the lock file and exits, the poller takes it; exit 0.
Run: python ok_wg_lockfile_released.py
"""

import contextlib
import multiprocessing as mp
import os
import tempfile
import time
from multiprocessing.synchronize import Event

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-wg-soft-{os.getpid()}.lock"),
)


def try_lock() -> bool:
    try:
        os.close(os.open(LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return True
    except FileExistsError:
        return False


def holder(locked: Event) -> None:
    if not try_lock():
        raise RuntimeError("the lock file exists")
    locked.set()
    time.sleep(8)  # the holder's work
    os.unlink(LOCK)


if __name__ == "__main__":
    with contextlib.suppress(FileNotFoundError):
        os.unlink(LOCK)
    locked = mp.Event()
    p = mp.Process(target=holder, args=(locked,))
    p.start()
    locked.wait()
    print("running", flush=True)
    while not try_lock():
        time.sleep(0.05)
    print("locked", flush=True)
    os.unlink(LOCK)
    p.join()
