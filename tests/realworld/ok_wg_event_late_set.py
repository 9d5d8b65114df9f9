"""HEALTHY look-alike of wg_dead_worker_queue.py: the main thread waits untimed on an Event
that a live worker thread sets after 8 s.

Source: the threading docs, Event.wait (https://docs.python.org/3/library/
threading.html#threading.Event.wait): blocks until the flag is set.
Versions: CPython 3.11.7, stdlib threading.
Looks like a hang: for 8 s the main thread waits in a futex wait with no timeout and the
worker sleeps; no CPU, no output.
Ends: the worker sets the event; exit 0.
Run: python ok_wg_event_late_set.py
"""

import threading
import time


def warm_up(ready: threading.Event) -> None:
    time.sleep(8)  # loading a model
    ready.set()


if __name__ == "__main__":
    ready = threading.Event()
    threading.Thread(target=warm_up, args=(ready,), name="warm-up").start()
    print("running", flush=True)
    ready.wait()
    print("ready", flush=True)
