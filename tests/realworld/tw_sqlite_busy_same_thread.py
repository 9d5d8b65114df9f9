"""stdlib sqlite3: one thread holds a write transaction on one connection and writes
through a second connection to the same file: the second waits for the first, forever.

Source: digital-fabric/extralite#54 "Script hangs with busy_timeout set for conflicting
transactions" (two connections to one file in one script, "that script will simply
indefinitely hang when run"); Dicklesworthstone/frankensqlite#327 "Single-process
self-deadlock" ("two connections in one process, one holding a write txn while the other"
writes: it "blocks for exactly 5.00 s (the busy timeout)").
Versions: CPython 3.11.7, stdlib sqlite3 (SQLite 3.40.1), rollback journal (the default).
Hang: the main thread inserts a job through connection A (the sqlite3 module opens a
transaction: A holds SQLite's RESERVED lock) and, before committing, calls a helper that
logs through its own connection B, opened with timeout=600 as users write it. B's UPDATE
needs the RESERVED lock; SQLite's busy handler sleeps (up to 100 ms at a time) and retries
for 600 s. Only this same thread could commit A, and it is inside B's retry loop. No CPU,
no output after "running".
Run: python tw_sqlite_busy_same_thread.py
"""

import contextlib
import os
import sqlite3
import tempfile

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
DB = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-sqlite-same-{os.getpid()}.db"),
)


def log_event(job_id: int | None, text: str) -> None:
    """A helper with its own connection (an audit log), as in many apps."""
    with contextlib.closing(sqlite3.connect(DB, timeout=600)) as log:
        log.execute("UPDATE jobs SET note = ? WHERE id = ?", (text, job_id))
        log.commit()


if __name__ == "__main__":
    for suffix in ("", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(DB + suffix)
    db = sqlite3.connect(DB, timeout=600)
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT, note TEXT)")
    db.commit()
    print("running", flush=True)
    cur = db.execute("INSERT INTO jobs (state) VALUES ('queued')")  # opens a transaction
    log_event(cur.lastrowid, "queued by main")  # A's transaction is still open
    db.commit()
    print("committed", flush=True)
