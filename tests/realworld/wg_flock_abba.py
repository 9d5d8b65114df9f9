"""Two processes take the same two flock() lock files in opposite orders.

Source: DenchHQ/DenchClaw#62 ("File lock implementation may deadlock with nested lock
acquisition": "If code paths acquire lock A then try to acquire lock B, while another
process holds B and tries to acquire A, a classic deadlock occurs"); the maintainer's
answer in openSUSE/open-build-service#1606 ("A deadlock can only occur if the processes try
to lock multiple different files in a cycle"); flock(2) has no deadlock detection (only
fcntl F_SETLKW has, fcntl(2) "Deadlock detection"; Tencent/MMKV#261 moved to flock for that).
Versions: CPython 3.11.7, stdlib fcntl.flock and multiprocessing (fork, Linux).
Hang: the indexer holds index.lock and waits in flock(LOCK_EX) for cache.lock; the pruner
holds cache.lock and waits for index.lock (a barrier makes both hold their first lock
before either asks for its second, on every run). The parent waits in Process.join. No
CPU, no output after "running".
Run: python wg_flock_abba.py
"""

import fcntl
import multiprocessing as mp
import os
import tempfile
from multiprocessing.synchronize import Barrier

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCKS = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-wg-flock-abba-{os.getpid()}"),
)


def job(first: str, second: str, both_hold: Barrier) -> None:
    with open(os.path.join(LOCKS, first), "w") as a:
        fcntl.flock(a, fcntl.LOCK_EX)
        both_hold.wait()
        with open(os.path.join(LOCKS, second), "w") as b:
            fcntl.flock(b, fcntl.LOCK_EX)  # the other job holds it and wants ours
            print(f"{first} then {second}: done", flush=True)


if __name__ == "__main__":
    os.makedirs(LOCKS, exist_ok=True)
    both_hold = mp.Barrier(2)
    jobs = [
        mp.Process(target=job, args=("index.lock", "cache.lock", both_hold), name="indexer"),
        mp.Process(target=job, args=("cache.lock", "index.lock", both_hold), name="pruner"),
    ]
    for p in jobs:
        p.start()
    print("running", flush=True)
    for p in jobs:
        p.join()
