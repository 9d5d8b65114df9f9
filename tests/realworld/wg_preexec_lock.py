"""subprocess.Popen(preexec_fn=...) in a threaded program: the preexec function takes a
lock that another thread held at the fork, and the child never reaches exec.

Source: python/cpython#120998 ("subprocess.Popen() hangs: parent process hangs at
os.read(errpipe_read) and child hangs at _posixsubprocess.fork_exec()"); the subprocess docs,
Popen: "The preexec_fn parameter is NOT SAFE to use in the presence of threads in your
application. The child process could deadlock before exec is called."
(https://docs.python.org/3/library/subprocess.html#popen-constructor); kirodotdev/KiroCrew#935
("a child deadlocked in a futex, never exec'd"); borgbase/vorta#187.
Versions: CPython 3.11.7, stdlib subprocess (_posixsubprocess with a preexec_fn: fork, then
Python code in the child) and threading.
Hang: the config thread holds the config lock at the fork (an Event orders it) and waits
for the spawn to finish before it releases it; the child, one thread, waits for the
lock in the preexec function (futex, no timeout: its holder is not in the child); the
spawning thread waits in _execute_child's read of the error pipe (the child holds its
write end until exec). No CPU, no output after "running".
Run: python wg_preexec_lock.py
"""

import resource
import subprocess
import threading

config_lock = threading.Lock()
limits = {"nofile": 1024}


def set_limits() -> None:  # the preexec_fn: runs in the child, between fork and exec
    with config_lock:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits["nofile"], limits["nofile"]))


def reload_config(holding: threading.Event, spawned: threading.Event) -> None:
    with config_lock:
        holding.set()
        spawned.wait()  # the new limits apply once the spawn is done
        limits["nofile"] = 2048


if __name__ == "__main__":
    holding, spawned = threading.Event(), threading.Event()
    threading.Thread(target=reload_config, args=(holding, spawned), name="config").start()
    holding.wait()
    print("running", flush=True)
    proc = subprocess.Popen(["true"], preexec_fn=set_limits)
    spawned.set()
    print("exit", proc.wait(), flush=True)
