"""Popen.communicate(timeout=...) times out, the caller kills the shell as the subprocess
docs advise and calls communicate() again: the shell's child `sleep` survives the kill,
keeps the stdout and stderr pipes, and the second communicate() waits for it.

Source: python/cpython#82388 (bpo-38207, vstinner: "Popen.kill() + Popen.communicate() is
blocking until all processes using the pipe close the pipe"); python/cpython#81605
(bpo-37424, "subprocess.run timeout does not function if shell=True and
capture_output=True": run() did exactly this kill-then-communicate; since the fix run()
only waits, so on 3.11 `run(..., timeout=1)` raises TimeoutExpired after 1 s, but the
docs' own recipe for Popen.communicate keeps the hang); tomerfiliba/plumbum#840
("`local["sh"]["-c", "sleep 30 & wait"](timeout=1)` hangs forever. The timeout thread
kills the direct child, but ... a grandchild that inherited stdout/stderr keeps them
open");
shisa-ai/shisad#132 ("on timeout the runner kills the tracked process tree and then calls
`process.communicate()` with no deadline").
Versions: CPython 3.11.7, stdlib subprocess; dash 0.5.12 as /bin/sh; GNU coreutils 9.1
sleep.
Hang: the shell runs `sleep 600` as its child. After 1 s communicate raises
TimeoutExpired; kill() SIGKILLs the shell only; `sleep` (an orphan now) keeps fds 1 and
2, the caller's pipes, and sleeps 600 s in clock_nanosleep. The caller waits in
Popen.communicate (poll on both pipes, no timeout) for an end-of-file that comes only when
the sleep ends. No CPU, no output after "running".
(By hand, Ctrl-C stops the sleep too: it stays in the terminal's process group.)
Run: python tw_communicate_after_kill.py
"""

import subprocess

# a slow conversion step that prints before and after its long part
STEP = "echo converting; sleep 600; echo converted"

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
