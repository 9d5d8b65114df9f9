"""Prints a line every 0.5 s until it is stopped: at any wall limit it is still making
progress (timeout-progressing), whatever the stall window."""

from __future__ import annotations

import time

if __name__ == "__main__":
    n = 0
    while True:
        print(f"step {n}", flush=True)
        n += 1
        time.sleep(0.5)
