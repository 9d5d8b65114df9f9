"""asyncio Process.wait() on a child writing to stdout=PIPE, with the pidfd child watcher:
the loop waits on the child's pidfd while the child waits for room in the pipe.

Source: the asyncio subprocess docs, Process.wait: "This method can deadlock when using
stdout=PIPE or stderr=PIPE and the child process generates so much output that it blocks
waiting for the OS pipe buffer to accept more data. Use the communicate() method when using
pipes to avoid this condition." (https://docs.python.org/3/library/asyncio-subprocess.html#asyncio.subprocess.Process.wait);
bojieli/ai-agent-book#100 (exactly this, from 256 KiB on: "2 x 64 KB reader limit + 64 KB
pipe buffer"); bytedance/SandboxFusion#53; PidfdChildWatcher
(https://docs.python.org/3.11/library/asyncio-policy.html#asyncio.PidfdChildWatcher), the
default watcher from Python 3.12 on.
Versions: CPython 3.11.7, stdlib asyncio (selector loop, epoll) with
asyncio.PidfdChildWatcher (pidfd_open, Linux 5.3+).
Hang: the StreamReader stops reading stdout at twice its 64 KiB limit (pause_reading), the
pipe fills, the child blocks in write(); the loop sleeps in epoll_wait (no timer) on its
self-pipe and the child's pidfd, which becomes readable only when the child exits. No CPU,
no output after "running".
Run: python wg_asyncio_pidfd_wait.py
"""

import asyncio
import sys

CHATTY = "import sys\nfor i in range(100000): sys.stdout.write(f'row {i} of the export\\n')"


async def export() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHATTY, stdout=asyncio.subprocess.PIPE
    )
    print("running", flush=True)
    code = await proc.wait()  # the pitfall: stdout is read only after the child exits
    assert proc.stdout is not None
    out = await proc.stdout.read()
    print(code, len(out), flush=True)


if __name__ == "__main__":
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    asyncio.run(export())
