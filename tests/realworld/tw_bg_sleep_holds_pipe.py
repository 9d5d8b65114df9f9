"""subprocess.check_output of a shell command that starts a job in the background and
prints its pid (`... & echo $!`): the job, coreutils `sleep`, inherits the stdout pipe, so
the caller reads on past the pid until the sleep ends.

Source: RayforceDB/rayforce#579 (".sys.exec with 'out blocks until a backgrounded child
closes stdout": `"sleep 3 &"` takes 3.00 s; "A daemon started this way ... blocks the
caller for the lifetime of the server, which reads as a hang"); python/cpython#75893
(vadmium: "check_output waits until it has read all possible output from the pipe(s)",
"there is probably a process somewhere that could still write to the write end");
davydany/sultan#26 (the idiom: "add `&` to the end of your command, and get the output
from `result.stdout` and parse it for the PID").
Versions: CPython 3.11.7, stdlib subprocess; dash 0.5.12 as /bin/sh; GNU coreutils 9.1
sleep.
Hang: the shell starts `sleep 600 &`, prints the pid and exits at once; `sleep` (an
orphan now) keeps fd 1, the caller's pipe, and sleeps 600 s in clock_nanosleep. The
caller waits in check_output (communicate with one pipe: read() to end-of-file, no
timeout) for an end-of-file that comes only when the sleep ends. No CPU, no output after
"running".
(By hand, Ctrl-C stops the caller but not the sleep: a non-interactive shell's `&` job
ignores SIGINT. It lingers, holding nothing anyone waits for, until its 600 s are up.)
Run: python tw_bg_sleep_holds_pipe.py
"""

import subprocess

# the background job: a stand-in for a long warm-up / cache-fill / server
JOB = "sleep 600"

if __name__ == "__main__":
    print("running", flush=True)
    pid = subprocess.check_output(f"{JOB} & echo $!", shell=True, text=True).strip()
    print("started job", pid, flush=True)
