"""A Python supervisor in `Popen.wait()` on a child that deadlocks (py_deadlock.py: two
threads, two locks taken in opposite order). Prints "supervising worker PID" first. The
whole tree is blocked on itself: the parent on its child, the child's threads on each other;
the hang is in the child, not in the parent that waits."""

import subprocess
import sys
from pathlib import Path


def main() -> int:
    worker = Path(__file__).resolve().parent / "py_deadlock.py"
    child = subprocess.Popen([sys.executable, str(worker)])
    print(f"supervising worker {child.pid}", flush=True)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
