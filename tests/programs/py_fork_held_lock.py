"""A child forked while another thread of the parent holds a threading.Lock: the child gets
the lock in its held state but not the thread that would release it, so its first `with
LOCK` waits forever while the parent waits for the child (fork() copies only the calling
thread: the POSIX fork rationale; CPython's os.fork docs and its 3.12 DeprecationWarning)."""

from __future__ import annotations

import os
import sys
import threading

LOCK = threading.Lock()
HELD = threading.Event()


def holder() -> None:
    with LOCK:
        HELD.set()
        threading.Event().wait()  # holds the lock for good (in the parent)


def main() -> int:
    threading.Thread(target=holder, name="holder", daemon=True).start()
    HELD.wait()
    pid = os.fork()
    if pid == 0:
        with LOCK:  # held by a thread that does not exist in this process
            print("child got the lock", flush=True)
        os._exit(0)
    print(f"parent waits for child {pid}", flush=True)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
