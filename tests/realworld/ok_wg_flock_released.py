"""HEALTHY look-alike of wg_flock_abba.py: a process waits in flock() for a lock whose holder
releases it after 8 s.

Source: flock(2) (https://man7.org/linux/man-pages/man2/flock.2.html): LOCK_EX blocks until
the holder unlocks or closes; tox-dev/filelock#397 (a waiter proceeds once it is released).
Versions: CPython 3.11.7, stdlib fcntl.flock and multiprocessing (fork, Linux).
Looks like a hang: for 8 s the parent waits in flock(LOCK_EX) while the holder sleeps with
the lock; no CPU, no output.
Ends: the holder unlocks and exits, the parent gets the lock; exit 0.
Run: python ok_wg_flock_released.py
"""

import fcntl
import multiprocessing as mp
import os
import tempfile
import time
from multiprocessing.synchronize import Event

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-wg-flock-{os.getpid()}.lock"),
)


def holder(locked: Event) -> None:
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        locked.set()
        time.sleep(8)  # a long migration under the lock
        fcntl.flock(f, fcntl.LOCK_UN)


if __name__ == "__main__":
    locked = mp.Event()
    p = mp.Process(target=holder, args=(locked,))
    p.start()
    locked.wait()
    print("running", flush=True)
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        print("locked", flush=True)
    p.join()
