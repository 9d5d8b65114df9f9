"""HEALTHY look-alike of wg_fork_lock_heartbeat.py: the same heartbeat and join(timeout=1)
loop around a forked worker that is not stuck: it forks after the refresh released its
lock, works (asleep) for 8 s and exits.

Source: the multiprocessing docs, Process.join(timeout)
(https://docs.python.org/3/library/multiprocessing.html#multiprocessing.Process.join).
Versions: CPython 3.11.7, stdlib multiprocessing (fork, Linux) and threading.
Looks like a hang: for 8 s the worker makes no progress and writes nothing, while the
parent keeps logging.
Ends: the worker exits 0, the loop ends; exit 0.
Run: python ok_wg_heartbeat_worker.py
"""

import multiprocessing as mp
import threading
import time

cache_lock = threading.Lock()


def refresh() -> None:
    with cache_lock:
        pass  # a quick refresh, done before the fork


def work() -> None:
    with cache_lock:  # free: the refresh ended before the fork
        time.sleep(8)  # a slow export


def heartbeat() -> None:
    while True:
        print("heartbeat", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    refresher = threading.Thread(target=refresh, name="refresh")
    refresher.start()
    refresher.join()
    worker = mp.get_context("fork").Process(target=work, name="worker")
    worker.start()
    print("running", flush=True)
    while worker.is_alive():
        worker.join(timeout=1)
        print("waiting for the worker", flush=True)
    print("worker exit", worker.exitcode, flush=True)
