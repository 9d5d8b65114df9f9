"""A cron-style job takes its instance lock with flock on an fd its children inherit, and
starts a helper daemon: the daemon keeps the lock after the job exits, and the next run of
the job waits for it forever.

Source: marcusquinn/aidevops#18094 ("pulse flock FD 9 inherited by child processes —
deadlocks all subsequent cycles": `exec 9>"$LOCKFILE"` without O_CLOEXEC, a `bd daemon`
started during the cycle inherits FD 9 and holds the flock after the pulse exits);
MagnaCapax/PMSS#663 ("orphaned child processes hold LOCK_EX indefinitely, blocking next
update.php invocation" in locks_lock_inode_wait); brooklyncentral/clocker#382 (haproxy -D
inherits flock's fd 9); flock(2): a lock belongs to the open file description, shared by
the duplicates fork() makes.
Versions: CPython 3.11.7, stdlib fcntl.flock, os.fork and subprocess.
Hang: run 1 locks, starts the daemon (fork, the daemon's parent exits at once: the daemon
is an orphan, reparented away from the job), and exits: its lock stays, held by the
daemon's inherited fd. The daemon waits forever for a stop request (Event.wait: a futex no
one will wake). Run 2 waits in flock(LOCK_EX); the cron wrapper waits for run 2 (wait4).
No CPU, no output after "run 2: waiting for the lock".
(By hand, Ctrl-C stops the daemon too: it stays in the terminal's process group.)
Run: python wg_daemon_holds_flock.py
"""

import fcntl
import os
import subprocess
import sys
import tempfile
import threading

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-wg-daemon-flock-{os.getpid()}.lock"),
)


def serve() -> None:
    """The helper daemon: serves until asked to stop; nothing ever asks."""
    threading.Event().wait()


def start_daemon() -> None:
    if os.fork() == 0:  # the classic daemon start: fork, and the parent exits at once
        if os.fork() == 0:
            serve()
        os._exit(0)


def cycle(run: int) -> None:
    fd = os.open(LOCK, os.O_WRONLY | os.O_CREAT, 0o644)  # exec 9>"$LOCKFILE"
    os.set_inheritable(fd, True)
    print(f"run {run}: waiting for the lock", flush=True)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print(f"run {run}: locked, syncing", flush=True)
    start_daemon()  # the sync starts its helper daemon (it inherits fd 9)
    print(f"run {run}: done", flush=True)  # exiting releases nothing: the daemon holds it


if __name__ == "__main__":
    if len(sys.argv) > 1:
        cycle(int(sys.argv[1]))
    else:
        print("running", flush=True)
        for run in (1, 2):  # the timer fires twice
            subprocess.run([sys.executable, __file__, str(run)], check=True)
