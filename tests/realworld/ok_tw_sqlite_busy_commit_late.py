"""HEALTHY look-alike of tw_sqlite_busy_other_process.py: a worker process holds a SQLite
write transaction for 7 s (a slow batch), then commits; the parent's write waits for it.

Source: the sqlite3 docs, connect(timeout=...) (https://docs.python.org/3/library/
sqlite3.html#sqlite3.connect): "How many seconds the connection should wait before raising
an OperationalError when a table is locked"; os-autoinst/openQA#4931 (a busy timeout long
enough to outlast a slow writer).
Versions: CPython 3.11.7, stdlib sqlite3 (SQLite 3.40.1) and multiprocessing (fork, Linux).
Looks like a hang: for 7 s the parent's only thread sleeps 100 ms at a time around an
fcntl lock that fails (SQLite's busy handler, timeout=600) and the worker sleeps holding
the lock; no output.
Ends: the worker commits and exits, the parent's INSERT takes the lock; exit 0.
Run: python ok_tw_sqlite_busy_commit_late.py
"""

import contextlib
import multiprocessing as mp
import os
import sqlite3
import tempfile
import time
from multiprocessing.synchronize import Event

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
DB = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-tw-sqlite-late-{os.getpid()}.db"),
)


def worker(locked: Event) -> None:
    db = sqlite3.connect(DB, timeout=600, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # claims the write lock for the batch
    db.execute("UPDATE jobs SET state = 'running' WHERE state = 'queued'")
    locked.set()
    time.sleep(7)  # the slow batch, the transaction open
    db.execute("UPDATE jobs SET state = 'done' WHERE state = 'running'")
    db.execute("COMMIT")
    db.close()


if __name__ == "__main__":
    for suffix in ("", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(DB + suffix)
    with contextlib.closing(sqlite3.connect(DB)) as init:
        init.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT)")
        init.execute("INSERT INTO jobs (state) VALUES ('queued')")
        init.commit()
    locked = mp.Event()
    p = mp.Process(target=worker, args=(locked,))
    p.start()
    locked.wait()
    print("running", flush=True)
    with contextlib.closing(sqlite3.connect(DB, timeout=600)) as db:
        db.execute("INSERT INTO jobs (state) VALUES ('queued')")  # waits for the lock
        db.commit()
        (n,) = db.execute("SELECT count(*) FROM jobs WHERE state = 'done'").fetchone()
    p.join()
    for suffix in ("", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(DB + suffix)
    print(f"done: {n} job(s) done, worker exit {p.exitcode}", flush=True)
    raise SystemExit(p.exitcode)
