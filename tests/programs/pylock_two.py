"""A plain two-lock Python deadlock, with both ways of taking a lock: `with lock:` and an
explicit `lock.acquire()`, one of the locks an RLock (CPython's C `_thread.RLock`, whose
owner is not readable from outside). A barrier makes the opposite order certain."""

import threading

ledger = threading.RLock()
journal = threading.Lock()
both_hold_one = threading.Barrier(2)


def post_entry() -> None:
    with ledger:
        both_hold_one.wait()
        journal.acquire()  # never: write_journal holds it
        journal.release()


def write_journal() -> None:
    journal.acquire()
    try:
        both_hold_one.wait()
        with ledger:  # never: post_entry holds it
            pass
    finally:
        journal.release()


def main() -> None:
    workers = [
        threading.Thread(target=post_entry, name="poster"),
        threading.Thread(target=write_journal, name="journaler"),
    ]
    for w in workers:
        w.start()
    print("both started", flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
