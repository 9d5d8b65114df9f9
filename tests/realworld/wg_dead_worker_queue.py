"""A producer thread dies of an uncaught exception; the main thread waits for its results
in an untimed queue.get() forever.

Source: tilezen/tilequeue#131 ("Exceptions on the background thread cause the process to
hang": the enqueuer thread crashes out "but the main thread carries on waiting for results.
This causes the whole program to hang indefinitely"); ScottyLabs/course-api#53 ("It hangs
when an error is thrown in a thread"); threading docs, excepthook: an uncaught exception
ends only its thread (https://docs.python.org/3/library/threading.html#threading.excepthook).
Versions: CPython 3.11.7, stdlib threading and queue.
Hang: the renderer raises on tile 3 (the traceback goes to stderr, the thread ends); main
has 3 of its 5 results and waits in Queue.get (a Condition wait, futex, no timeout) for a
put only the dead thread would have made. One thread left, no CPU, no output after the
traceback.
Run: python wg_dead_worker_queue.py
"""

import queue
import threading

TILES = [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]


def render(tile: tuple[int, int]) -> bytes:
    if tile == (1, 1):  # a data error in one tile
        raise ValueError(f"tile {tile}: bad geometry")
    return bytes(tile)


def produce(results: "queue.Queue[bytes]") -> None:
    for tile in TILES:
        results.put(render(tile))


def collect() -> list[bytes]:
    results: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=produce, args=(results,), name="enqueuer", daemon=True).start()
    got = []
    for _ in TILES:
        got.append(results.get())  # untimed: waits for a producer that no longer exists
        print(f"tile {len(got)} rendered", flush=True)
    return got


if __name__ == "__main__":
    print("running", flush=True)
    print(len(collect()), "tiles", flush=True)
