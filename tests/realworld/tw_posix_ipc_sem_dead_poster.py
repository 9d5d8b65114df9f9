"""posix_ipc: a named POSIX semaphore that a producer process was to release, but the
producer was killed first: the consumer's acquire(600) waits for a post that never comes.

Source: osvenskan/posix_ipc#53 ("posix semaphore does not release itself when the process
holding it terminates unexpectedly, which might block other waiting processes
indefinitely"; no SEM_UNDO for POSIX semaphores); Project-HAMi/HAMi-core#248 ("If a process
is killed while holding sem_postinit, the semaphore stays locked ... Every waiter reached
the retry limit").
Versions: CPython 3.11.7, posix_ipc 1.3.2 (wheel of 2025-10-23), glibc sem_timedwait,
multiprocessing (fork, Linux).
Hang: the consumer creates the semaphore /dev/shm/sem.puffer-tw-<hash> at 0 and starts a
producer that opens it by name, does its work and is SIGKILLed (the OOM killer) before
release(). The consumer waits in acquire(timeout=600): sem_timedwait, a futex wait with a
timeout on the shared mapping of the semaphore's /dev/shm file. Only a post could end it;
the only poster is dead (a zombie: the consumer never joins it). No CPU, no output after
"running".
Run: python tw_posix_ipc_sem_dead_poster.py
"""

import hashlib
import multiprocessing as mp
import os
import signal
import tempfile

import posix_ipc  # type: ignore[import-untyped, import-not-found, unused-ignore]

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
KEY = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-sem-dead-{os.getpid()}"),
)
NAME = "/puffer-tw-" + hashlib.sha256(KEY.encode()).hexdigest()[:16]


def producer() -> None:
    done = posix_ipc.Semaphore(NAME)  # opens the consumer's semaphore by name
    sum(i * i for i in range(100_000))  # the work whose end it was to announce
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer, before the post
    done.release()


if __name__ == "__main__":
    done = posix_ipc.Semaphore(NAME, posix_ipc.O_CREAT, initial_value=0)
    try:
        mp.Process(target=producer).start()
        print("running", flush=True)
        done.acquire(600)  # the producer posts when its result is written
        print("result ready", flush=True)
    finally:
        done.unlink()  # only when the run ends normally (or times out)
        done.close()
