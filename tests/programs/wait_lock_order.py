"""Two locks taken in opposite orders (the shape of python/cpython#96727, logging's
dictConfig against a handler's emit): the script's top level holds `first` and blocks on
`second`; thread "backwards" holds `second` and blocks on `first`. The top level is
`<module>`, which names no function: the location is the thread's function `backwards`.
"""

from __future__ import annotations

import threading
import time

first = threading.Lock()
second = threading.Lock()
taken = threading.Event()


def backwards() -> None:
    with second:
        taken.set()
        time.sleep(0.3)  # the top level now holds `first` and waits for `second`
        with first:
            print("never", flush=True)


worker = threading.Thread(target=backwards, name="backwards")
with first:
    worker.start()
    taken.wait()
    print("taking second", flush=True)
    with second:
        print("never", flush=True)
worker.join()
