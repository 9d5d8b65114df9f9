"""HEALTHY look-alike of wg_asyncio_set_result_thread.py: the same future, completed from a
thread with loop.call_soon_threadsafe() after 8 s.

Source: the asyncio docs, "Concurrency and Multithreading" (https://docs.python.org/3/library/
asyncio-dev.html#concurrency-and-multithreading): call_soon_threadsafe writes the loop's
self-pipe and wakes it.
Versions: CPython 3.11.7, stdlib asyncio (selector loop, epoll) and threading.
Looks like a hang: for 8 s the loop sleeps in epoll_wait (no timeout) on its self-pipe and
the fetcher thread sleeps; no CPU, no output.
Ends: the fetcher schedules set_result through the self-pipe, the loop wakes; exit 0.
Run: python ok_wg_asyncio_threadsafe.py
"""

import asyncio
import threading
import time


def fetch(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[int]") -> None:
    time.sleep(8)  # a slow blocking client
    loop.call_soon_threadsafe(fut.set_result, 42)


async def main() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    threading.Thread(target=fetch, args=(loop, fut), name="fetcher").start()
    print("running", flush=True)
    print("fetched", await fut, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
