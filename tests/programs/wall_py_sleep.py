"""Prints one line, then sleeps on timers in `idle_loop` (a `time.sleep` loop in the main
thread, an `Event.wait(timeout)` loop in a helper thread): silent, no CPU, every wait timed.
A hang of mechanism idle located in the sleep site, not a deadlock.

Neither timer fires while a test watches (an hour each), so the program is asleep at every
look: a helper woken every 0.5 s is runnable until a CPU takes it, which on a loaded host
lasts long enough for the look the verdict reads to see it running (state R), and a thread
running at that look is no sleeper (it was then called a deadlock)."""

from __future__ import annotations

import threading
import time


def heartbeat(stop: threading.Event) -> None:
    while not stop.wait(3600):
        pass


def idle_loop() -> None:
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    threading.Thread(target=heartbeat, args=(threading.Event(),), daemon=True).start()
    print("started", flush=True)
    idle_loop()
