"""A parent runs a chatty child with stdout=PIPE and waits for it before reading: once the
child has written a pipe's worth (64 KiB) its write blocks, and the parent's wait never
returns. The warning of the subprocess docs (Popen.wait: "This will deadlock when using
stdout=PIPE ... use Popen.communicate()"). With `communicate` as argument the parent reads
while it waits: the healthy look-alike, which finishes."""

from __future__ import annotations

import subprocess
import sys

CHATTY = "import sys\nfor i in range(20000):\n    sys.stdout.write('line %06d of chatter\\n' % i)\n"


def main() -> int:
    child = subprocess.Popen([sys.executable, "-c", CHATTY], stdout=subprocess.PIPE)
    print(f"parent {child.pid} started", flush=True)
    if sys.argv[1:] == ["communicate"]:
        out, _ = child.communicate()
        print(f"read {len(out)} bytes", flush=True)
        return child.returncode
    child.wait()  # deadlocks: nobody reads the pipe the child fills
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
