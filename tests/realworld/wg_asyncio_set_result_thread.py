"""An asyncio future completed from another thread with set_result() instead of
loop.call_soon_threadsafe(): the event loop is never woken.

Source: pybind/pybind11#3597 ("await statement blocks forever and doesn't return the result
of asyncio.Future on done": the result was set in another thread after the future was
returned); agronholm/apscheduler#437 (a future marked done from a BackgroundScheduler
thread is seen seconds later, only when something else wakes the loop); the asyncio docs,
"Concurrency and Multithreading": "To schedule a callback from another OS thread, the
loop.call_soon_threadsafe() method should be used" (https://docs.python.org/3/library/
asyncio-dev.html#concurrency-and-multithreading).
Versions: CPython 3.11.7, stdlib asyncio (the default selector loop: epoll on Linux) and
threading.
Hang: the fetcher thread calls fut.set_result() once the loop sleeps in epoll_wait; the
future's callback goes into the loop's ready queue, but nothing writes the loop's self-pipe
(a socketpair), and the loop has no timer, so epoll_wait(-1) never returns. The thread
then ends. One thread left, asleep in epoll_wait on the self-pipe only the process holds.
(The fetcher reads /proc/self/task/TID/syscall to call set_result only once the loop
sleeps, so that the bug bites on every run rather than on most.)
Run: python wg_asyncio_set_result_thread.py
"""

import asyncio
import platform
import threading
import time

# epoll_wait, epoll_pwait, epoll_pwait2 (x86_64); epoll_pwait, epoll_pwait2 (aarch64)
EPOLL_WAITS = {"x86_64": {"232", "281", "441"}, "aarch64": {"22", "441"}}


def asleep_in_epoll(tid: int) -> bool:
    with open(f"/proc/self/task/{tid}/syscall") as f:
        number = f.read().split()[0]
    return number in EPOLL_WAITS.get(platform.machine(), set())


def fetch(fut: "asyncio.Future[int]", loop_tid: int) -> None:
    result = sum(range(1000))
    while not asleep_in_epoll(loop_tid):
        time.sleep(0.01)
    fut.set_result(result)  # the bug: should be loop.call_soon_threadsafe(fut.set_result, ...)


async def main() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    threading.Thread(target=fetch, args=(fut, threading.get_native_id()), name="fetcher").start()
    print("running", flush=True)
    print("fetched", await fut, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
