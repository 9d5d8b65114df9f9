"""Compile the C test programs with gcc (-g -O0 -pthread) so stacks name functions.

Library use (tests/conftest.py): `compile_c("mutex_deadlock", out_dir)`.
Command line: `python tests/programs/build.py OUT_DIR [NAME ...]` (default: all).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent
CFLAGS = ["-g", "-O0", "-pthread", "-Wall", "-Wextra"]


class BuildError(RuntimeError):
    pass


def c_programs() -> list[str]:
    return sorted(p.stem for p in PROGRAMS.glob("*.c"))


def compile_c(name: str, out_dir: Path, cc: str = "gcc") -> Path:
    """Build tests/programs/NAME.c into out_dir/NAME unless an up-to-date binary is there.

    Safe for several processes at once (the test workers share out_dir): gcc writes a name
    of this process's own, linked into place when complete, so nobody runs half a binary;
    two that build at once both succeed and the first placed stays: replacing it would
    leave a program already started from it running a deleted file, whose frames a stack
    tool can no longer name (a test saw `mutex_deadlock (deleted)` and no location)."""
    # an absolute source path makes DWARF record it absolutely, so a sampler's own_roots
    # (the programs directory) matches the frames' files
    src = PROGRAMS / f"{name}.c"
    out = out_dir / name
    if out.exists() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f".{name}.{os.getpid()}.partial"
    argv = [cc, *CFLAGS, "-o", str(partial), str(src)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise BuildError(f"{' '.join(argv)} failed:\n{done.stderr}")
        try:
            os.link(partial, out)
        except FileExistsError:  # another process placed it meanwhile; a stale one goes
            if out.stat().st_mtime < src.stat().st_mtime:
                os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    for name in argv[1:] or c_programs():
        print(compile_c(name, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
