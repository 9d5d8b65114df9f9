"""Small file helpers every layer uses: atomic writes (a reader never sees half a file, a
crash never leaves one) and tolerant reads of files that may vanish (/proc, /sys)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_text(path: str | Path) -> str | None:
    """The file's text, or None when it vanished or cannot be read (a thread that exited,
    /proc files unreadable without ptrace rights, a cgroup file this kernel lacks)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
