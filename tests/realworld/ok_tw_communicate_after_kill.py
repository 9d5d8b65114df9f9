"""HEALTHY look-alike of tw_communicate_after_kill.py: Popen.communicate(timeout=1) times
out, the caller kills the shell and calls communicate() again; the shell's child `sleep`
keeps the pipes for 7 s and then exits.

Source: python/cpython#82388 (bpo-38207: after kill(), communicate() blocks "until all
processes using the pipe close the pipe"); python/cpython#81605 (bpo-37424).
Versions: CPython 3.11.7, stdlib subprocess; dash 0.5.12 as /bin/sh; GNU coreutils 9.1
sleep.
Looks like a hang: for about 6 s the caller waits in communicate (poll on both pipes, no
timeout) after its child, the shell, was killed, while the orphaned `sleep 7` holds the
pipes; no CPU, no output.
Ends: the sleep ends and closes the pipes; the caller gets end-of-file; exit 0.
Run: python ok_tw_communicate_after_kill.py
"""

import subprocess

STEP = "echo converting; sleep 7; echo converted"

if __name__ == "__main__":
    print("running", flush=True)
    proc = subprocess.Popen(
        STEP, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=1)
    except subprocess.TimeoutExpired:
        proc.kill()  # the recipe from the docs of Popen.communicate
        out, err = proc.communicate()
    print("gave up:", out.strip(), proc.returncode, flush=True)
