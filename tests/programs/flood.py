"""Write a deterministic flood of binary output to stdout, then report what was written.

    flood.py [--rate MB/s] [--seconds S] [--bytes N] [--seed N] [--stats PATH]
             [--final TEXT] [--block BYTES] [--text]

Blocks of --block bytes (default 1 MiB) cut from a seeded random pool: NUL bytes, invalid
UTF-8, CR and a newline every 256 bytes on average; every 5th block has no newline at all (a
line longer than a megabyte). --text: printable ASCII lines of about 85 bytes instead.
Paced at --rate MB/s (0: as fast as the reader takes it) for --seconds, or until --bytes are
written. The output never ends with a newline unless --final text does (ASCII with Python
escapes, e.g. '\\nPufferLib 5.0  steps=1  SPS=2  \\n'). --stats writes JSON: bytes,
seconds (first write to last), MB_per_s, sha256, newlines, ends_with_newline, blocks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

POOL = 8 * 1024 * 1024


def block(pool: bytes, size: int, i: int, text: bool) -> bytes:
    off = (i * 1_000_003) % POOL
    data = pool[off : off + size]
    if i % 5 == 3 and not text:
        data = data.replace(b"\n", b"\r")
    return data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=50.0, help="MB/s (1 MB = 1e6 bytes); 0 = unpaced")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--bytes", type=int, default=0, help="stop after this many bytes instead")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--block", type=int, default=1024 * 1024)
    ap.add_argument("--stats", default="")
    ap.add_argument("--final", default="")
    ap.add_argument("--text", action="store_true", help="printable lines of ~85 bytes instead")
    args = ap.parse_args()
    size = args.block
    pool = random.Random(args.seed).randbytes(POOL + size)
    if args.text:
        printable = bytes(range(0x20, 0x7F))
        table = b"\n\n\n" + bytes(printable[i % len(printable)] for i in range(253))
        pool = pool.translate(table)
    digest = hashlib.sha256()
    fd = sys.stdout.fileno()
    written = newlines = i = 0
    last = b""
    start = time.monotonic()
    while True:
        now = time.monotonic()
        if args.bytes and written >= args.bytes:
            break
        if not args.bytes and now - start >= args.seconds:
            break
        if args.rate > 0:
            due = start + written / (args.rate * 1e6)
            if due > now:
                time.sleep(due - now)
        data = block(pool, size, i, args.text)
        if args.bytes:
            data = data[: args.bytes - written]
        if data.endswith(b"\n"):
            data = data[:-1] + b"."
        write_all(fd, data)
        digest.update(data)
        written += len(data)
        newlines += data.count(b"\n")
        last = data
        i += 1
    end = time.monotonic()
    final = args.final.encode("ascii").decode("unicode_escape").encode("utf-8")
    if final:
        write_all(fd, final)
        digest.update(final)
        written += len(final)
        newlines += final.count(b"\n")
        last = final
    if args.stats:
        seconds = end - start
        stats = {
            "bytes": written,
            "seconds": seconds,
            "MB_per_s": written / seconds / 1e6 if seconds > 0 else 0.0,
            "sha256": digest.hexdigest(),
            "newlines": newlines,
            "ends_with_newline": last.endswith(b"\n"),
            "blocks": i,
        }
        with open(args.stats, "w") as f:
            json.dump(stats, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
