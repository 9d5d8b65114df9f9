"""HEALTHY look-alike of tw_posix_ipc_sem_dead_poster.py: the producer posts the named
semaphore after 7 s of work.

Source: the posix_ipc docs, Semaphore.acquire([timeout]) (https://semanchuk.com/philip/
posix_ipc/): "If the timeout is > 0, the call will wait no longer than timeout seconds".
Versions: CPython 3.11.7, posix_ipc 1.3.2, glibc sem_timedwait, multiprocessing (fork).
Looks like a hang: for 7 s the consumer waits in acquire(600) (a futex wait with a timeout
on the semaphore's /dev/shm mapping) and the producer sleeps; no output.
Ends: the producer posts and exits, the consumer joins it and unlinks the semaphore; exit 0.
Run: python ok_tw_posix_ipc_sem_late.py
"""

import hashlib
import multiprocessing as mp
import os
import tempfile
import time

import posix_ipc  # type: ignore[import-untyped, import-not-found, unused-ignore]

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
KEY = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-tw-sem-late-{os.getpid()}"),
)
NAME = "/puffer-tw-" + hashlib.sha256(KEY.encode()).hexdigest()[:16]


def producer() -> None:
    done = posix_ipc.Semaphore(NAME)  # opens the consumer's semaphore by name
    time.sleep(7)  # the work whose end it announces
    done.release()
    done.close()


if __name__ == "__main__":
    done = posix_ipc.Semaphore(NAME, posix_ipc.O_CREAT, initial_value=0)
    try:
        p = mp.Process(target=producer)
        p.start()
        print("running", flush=True)
        done.acquire(600)  # the producer posts when its work is done
        p.join()
        print(f"result ready, producer exit {p.exitcode}", flush=True)
    finally:
        done.unlink()  # only when the run ends normally (or times out)
        done.close()
