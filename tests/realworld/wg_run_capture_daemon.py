"""subprocess.run(..., capture_output=True) of a shell command that starts a server in the
background: the server inherits the stdout and stderr pipes and never closes them, so the
caller never sees end-of-file.

Source: gptme/gptme#3756 ("hang when background descendant retains output pipe": "a
command spawns a background descendant that inherits and retains the stdout/stderr
write-ends after the main child exits"); NousResearch/hermes-agent#12647 (fix for #8340:
"`cmd &` ... the grandchild inherits the write-end of our stdout pipe. Even after bash
itself exits, the pipe stays open"); python/cpython#75893 (vadmium: "there is probably a
process somewhere that could still write to the write end").
Versions: CPython 3.11.7, stdlib subprocess; /bin/sh.
Hang: the shell starts the server with `&` and exits at once; the server (an orphan now,
reparented away from the caller) keeps fds 1 and 2, which are the caller's pipes, and waits
forever for a stop request (Event.wait: a futex no one will wake). The caller waits in
Popen.communicate (poll on both pipes, no timeout) for an end-of-file that only the server
could give. No CPU, no output after "running".
(By hand, Ctrl-C stops the server too: it stays in the terminal's process group.)
Run: python wg_run_capture_daemon.py
"""

import shlex
import subprocess
import sys
import threading


def serve() -> None:
    """The background server: serves until asked to stop; nothing ever asks."""
    print("server: ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        print("running", flush=True)
        start = f"{shlex.quote(sys.executable)} {shlex.quote(__file__)} serve &"
        done = subprocess.run(["sh", "-c", start], capture_output=True, text=True)
        print("started:", done.returncode, done.stdout.strip(), flush=True)
