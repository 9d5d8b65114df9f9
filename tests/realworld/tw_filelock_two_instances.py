"""Two filelock.FileLock objects on the same lock file, taken one inside the other in one
thread: the inner acquire retries flock(LOCK_EX | LOCK_NB) every 50 ms until its timeout,
and only the outer one, held by the same thread, could let it go.

Source: tox-dev/filelock#315 ("Deadlock when a process tries to open and lock on the same
file twice"); tox-dev/filelock#481 ("Two different `FileLock` instances targeting the same
path in the same thread hang forever — flock() treats independently opened file
descriptors as separate locks, so LOCK_NB returns EAGAIN and the retry loop spins
indefinitely"; the fix raises only for an infinite timeout: "Finite timeouts ... are left
alone").
Versions: CPython 3.11.7, filelock 4.3.2 (a dependency of torch, in the venv).
Hang: a cache helper takes the lock with its own FileLock object, then calls an indexer
that makes another FileLock on the same path and acquires it with timeout=600. flock locks
belong to the open file description: the second open is refused (EAGAIN) and filelock
sleeps poll_interval (50 ms) and tries again, for ten minutes. The holder is the poller's
own process, and its only thread is the poller. No CPU to speak of, no output after
"running".
Run: python tw_filelock_two_instances.py
"""

import os
import tempfile

import filelock

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-filelock-{os.getpid()}.lock"),
)


def reindex() -> None:
    with filelock.FileLock(LOCK).acquire(timeout=600):  # a second object: a second open
        print("reindexed", flush=True)


def refresh_cache() -> None:
    with filelock.FileLock(LOCK):
        reindex()


if __name__ == "__main__":
    print("running", flush=True)
    refresh_cache()
