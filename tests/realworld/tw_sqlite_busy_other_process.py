"""stdlib sqlite3 across processes: a worker holds a write transaction while it waits for
its next job; the parent writes to the same file before sending that job.

Source: os-autoinst/openQA#4931 (a SQLite lock held by "`$db->begin('exclusive')` and then
never releasing the lock": another connection waits out the busy timeout, "the error occurs
only after 10 minutes"); AgentWorkforce/relayhistory#50 (a broker "frozen mid-write-
transaction ... held the SQLite write lock permanently"; the fix: "never hold one across I/O
or idle time").
Versions: CPython 3.11.7, stdlib sqlite3 (SQLite 3.40.1) and multiprocessing (fork, Linux).
Hang: the worker process begins a write (BEGIN IMMEDIATE: SQLite's RESERVED lock, an fcntl
lock on the database file) and then blocks in Queue.get() for its next job, its
transaction open. The parent records the job in the same database with timeout=600 before
putting it on the queue: SQLite's busy handler tries the lock, sleeps up to 100 ms and
retries for 600 s. Only the worker could commit, and it waits for the parent. No CPU, no
output after "running".
Run: python tw_sqlite_busy_other_process.py
"""

import contextlib
import multiprocessing as mp
import os
import sqlite3
import tempfile
from multiprocessing.synchronize import Event

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
DB = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-sqlite-proc-{os.getpid()}.db"),
)


def worker(jobs: "mp.Queue[int | None]", locked: Event) -> None:
    db = sqlite3.connect(DB, timeout=600, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # claims the write lock for the batch
    db.execute("UPDATE jobs SET state = 'running' WHERE state = 'queued'")
    locked.set()
    job = jobs.get()  # waits for the next job with the transaction still open
    db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job,))
    db.execute("COMMIT")


if __name__ == "__main__":
    for suffix in ("", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(DB + suffix)
    with contextlib.closing(sqlite3.connect(DB)) as init:
        init.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT)")
        init.execute("INSERT INTO jobs (state) VALUES ('queued')")
        init.commit()
    jobs: "mp.Queue[int | None]" = mp.Queue()
    locked = mp.Event()
    p = mp.Process(target=worker, args=(jobs, locked))
    p.start()
    locked.wait()
    print("running", flush=True)
    db = sqlite3.connect(DB, timeout=600)
    cur = db.execute("INSERT INTO jobs (state) VALUES ('queued')")  # waits for the lock
    db.commit()
    jobs.put(cur.lastrowid)
    p.join()
    print("done", flush=True)
