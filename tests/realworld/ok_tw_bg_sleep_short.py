"""HEALTHY look-alike of tw_bg_sleep_holds_pipe.py: subprocess.check_output of
`sleep 7 & echo $!`; the background sleep keeps the stdout pipe for 7 s and then exits.

Source: RayforceDB/rayforce#579 (`"sleep 3 &"` takes 3.00 s: the caller reads until the
background job closes stdout); python/cpython#75893.
Versions: CPython 3.11.7, stdlib subprocess; dash 0.5.12 as /bin/sh; GNU coreutils 9.1
sleep.
Looks like a hang: for 7 s the caller waits in check_output (read() on its pipe, no
timeout) after the shell has exited, while the orphaned `sleep 7` holds the pipe; no CPU,
no output.
Ends: the sleep ends and closes the pipe; the caller gets end-of-file; exit 0.
Run: python ok_tw_bg_sleep_short.py
"""

import subprocess

JOB = "sleep 7"

if __name__ == "__main__":
    print("running", flush=True)
    pid = subprocess.check_output(f"{JOB} & echo $!", shell=True, text=True).strip()
    print("started job", pid, flush=True)
