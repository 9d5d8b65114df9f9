"""A tool holds its global lock (fcntl.lockf, a blocking POSIX lock) while it runs a hook
that invokes the same tool again: the nested invocation waits for the lock its parent holds,
the parent waits for the hook.

Source: YunoHost/moulinette#151 ("Commands like `yunohost service regen-conf` needs to
indirectly call daughter `yunohost` commands ... you cannot run multiple `yunohost`
commands at the same time (c.f. lock mechanism)", fixed by letting a child see that an
ancestor holds the lock); GreptimeTeam/greptimedb#7692 (the same hold-and-wait between a
parent and the child it waits for); the blocking lockf as pex-tool/pex#1693's
atomic_directory used it (`fcntl.lockf(lock_fd, fcntl.LOCK_EX)  # A blocking write lock`).
Versions: CPython 3.11.7, stdlib fcntl.lockf (F_SETLKW) and subprocess.
Hang: the nested invocation waits in fcntl(F_SETLKW) for the parent's lock; the kernel's
deadlock detection does not see it (the parent waits for a child, not for a lock); the
parent waits in subprocess.run (wait4) for the hook. No CPU, no output after "running".
Run: python wg_lockf_nested.py
"""

import fcntl
import os
import subprocess
import sys
import tempfile

# one name per run, inherited by the processes it starts (the environment): two runs at
# once (the bench's plain lane beside the harness) must not share it
LOCK = os.environ.setdefault(
    "PUFFER_WG_PATH",
    os.path.join(tempfile.gettempdir(), f"puffer-wg-lockf-nested-{os.getpid()}.lock"),
)


def locked() -> int:
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX)  # one instance of the tool at a time
    return fd


def tool(nested: bool) -> None:
    fd = locked()
    try:
        if nested:
            print("hook: listing domains", flush=True)
            return
        print("running", flush=True)
        # regen-conf runs its hooks, and a hook asks the tool itself for the domains
        subprocess.run([sys.executable, __file__, "--nested"], check=True)
        print("regen-conf done", flush=True)
    finally:
        os.close(fd)


if __name__ == "__main__":
    tool(nested="--nested" in sys.argv)
