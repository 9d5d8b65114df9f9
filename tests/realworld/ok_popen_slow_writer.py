"""HEALTHY look-alike of popen_wait_pipe.py: a parent reading a slow but live writer.

Source: the remedy the subprocess docs give for the Popen.wait deadlock
(https://docs.python.org/3/library/subprocess.html#subprocess.Popen.communicate).
Versions: CPython 3.11.7, stdlib subprocess.
Looks like a hang: the parent blocks reading the child's pipe for about 7 s while the
child, silent, sleeps between its writes; then the child writes 1 MB and exits.
Ends: exit 0 after printing the byte count.
Run: python ok_popen_slow_writer.py
"""

import subprocess
import sys

SLOW = (
    "import sys, time\n"
    "time.sleep(3.5); sys.stdout.write('x' * 1000); sys.stdout.flush()\n"
    "time.sleep(3.5); sys.stdout.write('y' * 1000000)\n"
)

if __name__ == "__main__":
    print("running", flush=True)
    proc = subprocess.Popen([sys.executable, "-c", SLOW], stdout=subprocess.PIPE)
    out, _ = proc.communicate()  # reads while it waits: no deadlock
    print(proc.returncode, len(out), flush=True)
