"""util-linux flock runs a job that starts a helper in the background: the helper, a
coreutils `sleep`, inherits flock's lock fd and keeps the lock after flock and the job
exit, and the next `flock` on the same file waits for it.

Source: ceph/ceph-qa-suite#583 ("buildpackages: flock must --close": "The process run by
flock must not inherit the file descriptor because this will cause the lock to be held
forever should the command survive the call to flock"); marcusquinn/aidevops#18094
("pulse flock FD 9 inherited by child processes — deadlocks all subsequent cycles": lsof
on the lock file lists `sleep ... 9w ... pulse-wrapper.lock` among its holders);
juju/mutex#5 ("Set close-on-exec flag on the flock FD so that subprocesses do not hold the
flock open"); flock(1): without -o the command keeps the fd; flock(2): the lock belongs to
the open file description, shared with every copy fork() makes.
Versions: CPython 3.11.7, stdlib subprocess; util-linux 2.38.1 flock; dash 0.5.12 as
/bin/sh; GNU coreutils 9.1 sleep.
Hang: run 1, `flock LOCK sh -c 'sleep 600 &'`, locks, starts the job and exits at once;
the `sleep` (an orphan now) holds the open lock fd and sleeps 600 s in clock_nanosleep.
Run 2, `flock LOCK ...`, waits in flock(LOCK_EX); the caller waits for run 2 (wait4). No
CPU, no output after "run 2: waiting for the lock".
(By hand, Ctrl-C stops the caller and run 2 but not the sleep: a non-interactive shell's
`&` job ignores SIGINT. It keeps the lock until its 600 s are up: the next run waits too.)
Run: python tw_flock_held_by_sleep.py
"""

import os
import subprocess
import tempfile

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-tw-flock-sleep-{os.getpid()}.lock"),
)

# the job run under the lock: it leaves a helper (a cache warmer) in the background
JOB = "sleep 600 &"

if __name__ == "__main__":
    print("running", flush=True)
    for run in (1, 2):  # the cron timer fires twice
        print(f"run {run}: waiting for the lock", flush=True)
        subprocess.run(["flock", LOCK, "sh", "-c", JOB], check=True)
        print(f"run {run}: done", flush=True)
