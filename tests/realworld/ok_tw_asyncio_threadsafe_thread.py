"""HEALTHY look-alike of tw_asyncio_threadsafe_in_loop.py: the same sync wrapper, called
from a worker thread (asyncio.to_thread) as the docs intend; the coroutine takes 7 s.

Source: the docs, asyncio.run_coroutine_threadsafe ("meant to be called from a different
OS thread than the one where the event loop is running",
https://docs.python.org/3/library/asyncio-task.html#asyncio.run_coroutine_threadsafe).
Versions: CPython 3.11.7, stdlib asyncio (selector loop, epoll) and concurrent.futures.
Looks like a hang: for 7 s the worker thread waits in Future.result(timeout=600) (a futex
wait with a timeout) and the loop sleeps in epoll_wait for the coroutine's 7 s timer; no
CPU, no output.
Ends: the coroutine finishes on the loop, the worker gets its result; exit 0.
Run: python ok_tw_asyncio_threadsafe_thread.py
"""

import asyncio


class UploadCache:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._files = {"report.pdf": "file-123"}

    async def aget(self, name: str) -> str | None:
        await asyncio.sleep(7)  # a slow upload-status request
        return self._files.get(name)

    def get(self, name: str) -> str | None:
        future = asyncio.run_coroutine_threadsafe(self.aget(name), self._loop)
        return future.result(timeout=600)  # from a worker thread: the loop stays free


async def main() -> None:
    cache = UploadCache(asyncio.get_running_loop())
    print("running", flush=True)
    print("cached:", await asyncio.to_thread(cache.get, "report.pdf"), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
