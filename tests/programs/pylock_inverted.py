"""Two threading locks taken in both orders, by two threads that never overlap: the first
thread takes `ledger` then `journal` and finishes, only then the second takes `journal`
then `ledger`. This run cannot deadlock; the same threads started together could."""

from __future__ import annotations

import threading

ledger = threading.Lock()
journal = threading.Lock()


def post() -> None:
    with ledger, journal:
        pass


def audit() -> None:
    with journal, ledger:
        pass


for target in (post, audit):
    worker = threading.Thread(target=target, name=target.__name__)
    worker.start()
    worker.join()
print("done", flush=True)
