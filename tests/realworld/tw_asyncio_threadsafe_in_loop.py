"""asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=600) called on the event
loop's own thread: the loop is blocked in .result() and can never run the coroutine.

Source: crewAIInc/crewAI#6742 ("UploadCache sync wrappers deadlock when called from inside
a running event loop": _run_sync schedules the coroutine on the caller's own running loop
"and then blocks the caller's thread waiting for it. That thread **is** the thread running
the loop"; there with result(timeout=30)); empicano/aiomqtt#174 ("When called from
self._loop, the following code will deadlock: run_coroutine_threadsafe(...); fut.result()");
python/cpython#121075 (the same call from a coroutine ends in TimeoutError); the docs: "This
function is meant to be called from a different OS thread than the one where the event loop
is running" (https://docs.python.org/3/library/asyncio-task.html#asyncio.run_coroutine_threadsafe).
Versions: CPython 3.11.7, stdlib asyncio (default selector loop) and concurrent.futures.
Hang: main() awaits nothing before calling the sync helper, so the only thread, the loop's,
waits in concurrent.futures.Future.result(timeout=600) (a Condition wait: futex, private,
with a timeout); the coroutine sits in the loop's ready queue and only that thread could run
it. No CPU, no output after "running" for ten minutes, then a TimeoutError.
Run: python tw_asyncio_threadsafe_in_loop.py
"""

import asyncio


class UploadCache:
    def __init__(self) -> None:
        self._files: dict[str, str] = {}

    async def aget(self, name: str) -> str | None:
        await asyncio.sleep(0)
        return self._files.get(name)

    def get(self, name: str) -> str | None:
        """Sync wrapper 'without blocking the event loop'."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aget(name))
        future = asyncio.run_coroutine_threadsafe(self.aget(name), loop)
        return future.result(timeout=600)  # this thread IS the loop's thread


async def main() -> None:
    cache = UploadCache()
    print("running", flush=True)
    print("cached:", cache.get("report.pdf"), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
