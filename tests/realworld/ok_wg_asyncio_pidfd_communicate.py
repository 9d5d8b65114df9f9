"""HEALTHY look-alike of wg_asyncio_pidfd_wait.py: the same pidfd child watcher and chatty
child, read with communicate() (the remedy the docs give); the child is silent for 8 s first.

Source: the asyncio subprocess docs, Process.communicate ("Use the communicate() method when
using pipes to avoid this condition", https://docs.python.org/3/library/
asyncio-subprocess.html#asyncio.subprocess.Process.communicate).
Versions: CPython 3.11.7, stdlib asyncio with asyncio.PidfdChildWatcher (Linux 5.3+).
Looks like a hang: for 8 s the loop sleeps in epoll_wait (no timeout) on its self-pipe, the
child's stdout pipe and its pidfd, and the child sleeps; no CPU, no output.
Ends: the child writes 2 MB, the loop drains it and sees the pidfd; exit 0.
Run: python ok_wg_asyncio_pidfd_communicate.py
"""

import asyncio
import sys

SLOW = (
    "import sys, time\ntime.sleep(8)\n"
    "for i in range(100000): sys.stdout.write(f'row {i} of the export\\n')"
)


async def export() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SLOW, stdout=asyncio.subprocess.PIPE
    )
    print("running", flush=True)
    out, _ = await proc.communicate()
    print(proc.returncode, len(out), flush=True)


if __name__ == "__main__":
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    asyncio.run(export())
