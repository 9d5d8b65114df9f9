"""HEALTHY look-alike of tw_flock_held_by_sleep.py: util-linux flock runs a job that leaves
`sleep 7` in the background holding the lock fd; the next `flock` waits 7 s for it.

Source: ceph/ceph-qa-suite#583 (a command surviving `flock` keeps the lock: "flock must
--close"); marcusquinn/aidevops#18094 (`sleep` among the holders of the inherited lock
fd); flock(2): the lock goes when the last fd on the open file description closes.
Versions: CPython 3.11.7, stdlib subprocess; util-linux 2.38.1 flock; dash 0.5.12 as
/bin/sh; GNU coreutils 9.1 sleep.
Looks like a hang: for 7 s run 2 waits in flock(LOCK_EX) and the caller in wait4, while
the orphaned `sleep 7` holds the lock; no CPU, no output.
Ends: the sleep ends, its fd closes, the lock goes; run 2 gets it; exit 0.
Run: python ok_tw_flock_short.py
"""

import os
import subprocess
import tempfile

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-ok-tw-flock-{os.getpid()}.lock"),
)

JOB = "sleep 7 &"

if __name__ == "__main__":
    print("running", flush=True)
    for run in (1, 2):  # the cron timer fires twice
        print(f"run {run}: waiting for the lock", flush=True)
        subprocess.run(["flock", LOCK, "sh", "-c", JOB], check=True)
        print(f"run {run}: done", flush=True)
    print("finished", flush=True)
