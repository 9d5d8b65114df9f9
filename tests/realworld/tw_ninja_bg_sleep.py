"""ninja runs a build command that starts a helper in the background (`... &`): the
helper, a coreutils `sleep`, inherits the pipe ninja reads the command's output from, so
ninja never sees the command end and the build never finishes.

Source: ninja-build/ninja#2052 ("ninja hanging with zombie child process": ninja in
ppoll under SubprocessSet::DoWork, its `sh` child a zombie; lrntgr: "I am facing the same
issue with a simple command that starts `sleep` command in background", `command = sleep
infinity &`); ninja manual: a command's output is buffered and shown when it ends (the
console pool is the exception).
Versions: CPython 3.11.7, stdlib subprocess; ninja 1.11.1 (Debian ninja-build);
dash 0.5.12 as /bin/sh; GNU coreutils 9.1 sleep.
Hang: the build command's shell starts `sleep 600 &` and exits at once (a zombie: ninja
reaps a command only after end-of-file on its output pipe); `sleep` (an orphan now)
keeps fds 1 and 2, the write end of that pipe, and sleeps 600 s in clock_nanosleep.
ninja waits in ppoll (no timeout) for the end-of-file; the caller waits for ninja
(wait4). No CPU, no output after "running" (and ninja's own first lines).
(ninja starts each command in a process group of its own: a SIGKILL to the caller's
process group leaves the sleep running; so does Ctrl-C, which ninja passes on as SIGINT,
ignored by a non-interactive shell's `&` job. It ends after its 600 s, or kill it.)
Run: python tw_ninja_bg_sleep.py
"""

import os
import subprocess
import tempfile

# one build directory per run, inherited by the processes it starts (the environment):
# two runs at once (the bench's plain lane beside the harness) must not share it
BUILD_DIR = os.environ.setdefault(
    "PUFFER_WG_PATH", os.path.join(tempfile.gettempdir(), f"puffer-tw-ninja-{os.getpid()}")
)

# a step that starts a mock server for the tests run after it
BUILD = """\
rule run
  command = $cmd
build mock-server: run
  cmd = sleep 600 & echo mock server started
"""

if __name__ == "__main__":
    print("running", flush=True)
    os.makedirs(BUILD_DIR, exist_ok=True)
    with open(os.path.join(BUILD_DIR, "build.ninja"), "w") as f:
        f.write(BUILD)
    subprocess.run(["ninja", "-C", BUILD_DIR], check=True)
    print("build done", flush=True)
