"""Healthy look-alike of pylock_two.py: two threads take the same two locks, in the same
order, many times, and finish; the main thread waits in join meanwhile."""

import threading
import time

ledger = threading.RLock()
journal = threading.Lock()
ROUNDS = 40


def work(name: str) -> None:
    for i in range(ROUNDS):
        with ledger, journal:
            time.sleep(0.02)  # hold both a while: the other thread waits on ledger
        if i % 10 == 0:
            print(f"{name} round {i}", flush=True)


def main() -> None:
    workers = [threading.Thread(target=work, args=(n,), name=n) for n in ("poster", "journaler")]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()
