"""HEALTHY look-alike of wg_run_capture_daemon.py: subprocess.run(..., capture_output=True) of
a shell command whose background job keeps the pipes for 8 s and then exits.

Source: python/cpython#75893 ("check_output waits until it has read all possible output
from the pipe(s)", a background writer included); gptme/gptme#3756.
Versions: CPython 3.11.7, stdlib subprocess; /bin/sh.
Looks like a hang: for 8 s the caller waits in communicate (poll on its pipes) after the
shell has exited, while the background job, an orphan holding the pipes, sleeps; no CPU,
no output.
Ends: the job prints and exits, closing the pipes; the caller gets end-of-file; exit 0.
Run: python ok_wg_run_background_exits.py
"""

import shlex
import subprocess
import sys

JOB = "import time; time.sleep(8); print('background job done')"

if __name__ == "__main__":
    print("running", flush=True)
    start = f"{shlex.quote(sys.executable)} -c {shlex.quote(JOB)} &"
    done = subprocess.run(["sh", "-c", start], capture_output=True, text=True, check=True)
    print("captured:", done.stdout.strip(), flush=True)
