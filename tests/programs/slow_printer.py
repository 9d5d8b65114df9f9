"""Print a line every 0.3 s for argv[1] seconds (default 3), then exit 0.

A slow program that keeps making progress: it must never be called a hang.
"""

import sys
import time


def main() -> int:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    start = time.monotonic()
    step = 0
    while time.monotonic() - start < duration:
        print(f"step {step} elapsed {time.monotonic() - start:.1f}s", flush=True)
        step += 1
        time.sleep(0.3)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
