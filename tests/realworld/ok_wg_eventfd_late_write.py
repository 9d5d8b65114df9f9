"""HEALTHY look-alike: the main thread waits in a blocking read of an eventfd that a worker
thread writes after 8 s.

Source: the os docs, os.eventfd and os.eventfd_read (https://docs.python.org/3/library/
os.html#os.eventfd): a read blocks until the counter is non-zero; eventfd(2).
Versions: CPython 3.11.7, stdlib os.eventfd (Linux).
Looks like a hang: for 8 s the main thread waits in read() on the eventfd and the worker
sleeps; no CPU, no output.
Ends: the worker writes the eventfd, main reads 1; exit 0.
Run: python ok_wg_eventfd_late_write.py
"""

import os
import threading
import time


def notify_later(efd: int) -> None:
    time.sleep(8)
    os.eventfd_write(efd, 1)


if __name__ == "__main__":
    efd = os.eventfd(0)
    threading.Thread(target=notify_later, args=(efd,), name="notifier").start()
    print("running", flush=True)
    print("events:", os.eventfd_read(efd), flush=True)
    os.close(efd)
