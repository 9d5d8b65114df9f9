"""A parent in `Popen.wait()` on a child that fills its stdout pipe: the deadlock the
subprocess docs warn of ("Popen.wait: This will deadlock when using stdout=PIPE … and the
child process generates enough output to a pipe such that it blocks waiting for the OS pipe
buffer to accept more data"). The child blocks writing in `chatter`, the pipe read only by
the parent; the parent waits for the child in `Popen.wait`: neither moves again.

    python wait_popen_pipe.py          # the parent
    python wait_popen_pipe.py child    # the chatty child (run by the parent)
"""

from __future__ import annotations

import subprocess
import sys


def chatter() -> None:
    line = b"x" * 1023 + b"\n"
    for _ in range(1 << 20):  # 1 GiB: far beyond any pipe buffer
        sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()


def supervise() -> int:
    child = subprocess.Popen([sys.executable, __file__, "child"], stdout=subprocess.PIPE)
    print(f"started child {child.pid}", flush=True)
    return child.wait()  # never drains child.stdout


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        chatter()
    else:
        sys.exit(supervise())
