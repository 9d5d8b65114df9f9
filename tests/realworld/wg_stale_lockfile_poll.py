"""A lock-file lock (O_CREAT | O_EXCL, the way SoftFileLock, pip's and conda's lock files
work) left behind by a holder that was killed: the next process polls for it forever.

Source: tox-dev/filelock#476 ("When a process holding a SoftFileLock crashes, the lock file
is left behind and blocks every other process forever"); tox-dev/filelock#33 ("SoftFileLock
can deadlock sometimes if process ends abruptly"); commercialhaskell/stack#3407 (lock files
after a SIGKILL); the filelock docs, "FileLock vs SoftFileLock"
(https://py-filelock.readthedocs.io/en/latest/#filelock-vs-softfilelock).
Versions: CPython 3.11.7, stdlib os and multiprocessing (fork, Linux).
Hang: the first holder is SIGKILLed (an OOM kill) between creating the lock file and
removing it; the next acquire() retries every 50 ms (filelock's poll_interval) with no
timeout (timeout=-1, the default): a timed sleep around a check that never becomes true.
Not a deadlock: a polling loop that never ends (a stall verdict). No output after
"running".
Run: python wg_stale_lockfile_poll.py
"""

import contextlib
import multiprocessing as mp
import os
import signal
import tempfile
import time

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-wg-stale-{os.getpid()}.lock"),
)


class SoftLock:
    def __init__(self, path: str, poll_interval: float = 0.05) -> None:
        self.path, self.poll_interval = path, poll_interval

    def acquire(self) -> None:
        while True:
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return
            except FileExistsError:
                time.sleep(self.poll_interval)

    def release(self) -> None:
        os.unlink(self.path)


def crashed_holder() -> None:
    SoftLock(LOCK).acquire()
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, before release()


if __name__ == "__main__":
    with contextlib.suppress(FileNotFoundError):
        os.unlink(LOCK)  # this run makes its own stale lock
    first = mp.Process(target=crashed_holder)
    first.start()
    first.join()
    print("running", flush=True)
    lock = SoftLock(LOCK)
    lock.acquire()
    print("locked", flush=True)
    lock.release()
