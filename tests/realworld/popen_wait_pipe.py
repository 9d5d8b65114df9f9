"""Popen(stdout=PIPE).wait() with a child that writes more than a pipe holds.

Source: the subprocess docs, Popen.wait: "This will deadlock when using stdout=PIPE or
stderr=PIPE and the child process generates enough output to a pipe such that it blocks
waiting for the OS pipe buffer to accept more data. Use Popen.communicate() when using
pipes to avoid that." (https://docs.python.org/3/library/subprocess.html#subprocess.Popen.wait)
Versions: CPython 3.11.7, stdlib subprocess; Linux pipe capacity 64 KiB.
Hang: the child blocks in write(1, ...) on the full pipe; the parent, which never reads
it, blocks in Popen.wait (wait4) for the child. No CPU, no output after "running".
Run: python popen_wait_pipe.py
"""

import subprocess
import sys

CHATTY = "import sys\nfor i in range(100000): sys.stdout.write(f'line {i} of the report\\n')"

if __name__ == "__main__":
    print("running", flush=True)
    proc = subprocess.Popen([sys.executable, "-c", CHATTY], stdout=subprocess.PIPE)
    code = proc.wait()  # the pitfall: the pipe is read only after the child ends
    out = proc.stdout.read() if proc.stdout else b""
    print(code, len(out), flush=True)
