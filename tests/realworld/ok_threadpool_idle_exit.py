"""HEALTHY look-alike of fork_threadpool.py: an idle pool thread in a parent that waits
for a slow child and then exits cleanly.

Source: the ThreadPoolExecutor docs (https://docs.python.org/3/library/
concurrent.futures.html#threadpoolexecutor): idle workers wait on the work queue and are
joined at interpreter exit.
Versions: CPython 3.11.7, stdlib concurrent.futures and subprocess.
Looks like a hang: for about 7 s the parent's main thread waits for its child (wait4), its
pool worker waits idle on the queue, and the child sleeps without output.
Ends: exit 0; the executor's thread is joined at exit.
Run: python ok_threadpool_idle_exit.py
"""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=2)

if __name__ == "__main__":
    print("warm:", POOL.submit(sum, [1, 2, 3]).result(), flush=True)
    subprocess.run([sys.executable, "-c", "import time; time.sleep(7)"], check=True)
    print("child done", flush=True)
