"""HEALTHY look-alike of tw_ninja_bg_sleep.py: ninja runs a build command that leaves
`sleep 7` in the background holding the command's output pipe; ninja waits 7 s for it.

Source: ninja-build/ninja#2052 (ninja waits in ppoll for the output pipe of a command
that started `sleep ... &`); ninja manual (output is read until the command ends).
Versions: CPython 3.11.7, stdlib subprocess; ninja 1.11.1 (Debian ninja-build);
dash 0.5.12 as /bin/sh; GNU coreutils 9.1 sleep.
Looks like a hang: for 7 s ninja waits in ppoll (no timeout) beside its zombie `sh` and
the caller in wait4, while the orphaned `sleep 7` holds the pipe; no CPU, no output.
Ends: the sleep ends and closes the pipe; ninja reaps the command and finishes; exit 0.
Run: python ok_tw_ninja_bg_short.py
"""

import os
import shutil
import subprocess
import tempfile

# one build directory per run, inherited by the processes it starts (the environment):
# two runs at once (the bench's plain lane beside the harness) must not share it
BUILD_DIR = os.environ.setdefault(
    "PUFFER_WG_PATH", os.path.join(tempfile.gettempdir(), f"puffer-ok-tw-ninja-{os.getpid()}")
)

BUILD = """\
rule run
  command = $cmd
build mock-server: run
  cmd = sleep 7 & echo mock server started
"""

if __name__ == "__main__":
    print("running", flush=True)
    os.makedirs(BUILD_DIR, exist_ok=True)
    with open(os.path.join(BUILD_DIR, "build.ninja"), "w") as f:
        f.write(BUILD)
    subprocess.run(["ninja", "-C", BUILD_DIR], check=True)
    shutil.rmtree(BUILD_DIR)
    print("build done", flush=True)
