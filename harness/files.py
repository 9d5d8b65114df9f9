"""Small file helpers every layer uses: atomic writes (a reader never sees half a file, a
crash never leaves one), tolerant reads of files that may vanish (/proc, /sys), and the
one-line wording of a write that failed (a full disk, a quota, a read-only folder)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed into place. On failure (a
    full disk: ENOSPC, EDQUOT, or EFBIG under RLIMIT_FSIZE) the temporary file is removed and
    the OSError raised: `path` keeps its previous content, whole."""
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


def write_failure(exc: OSError) -> str:
    """An OSError of a write in one line, for a note or the terminal: "No space left on
    device (ENOSPC)", "File too large (EFBIG)"."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc) or type(exc).__name__
    return f"{text} ({name})" if name else text


def read_text(path: str | Path) -> str | None:
    """The file's text, or None when it vanished or cannot be read (a thread that exited,
    /proc files unreadable without ptrace rights, a cgroup file this kernel lacks)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cache_home() -> Path:
    """The harness's cache root, not created: $HARNESS_CACHE_DIR (empty means unset), else
    ~/.cache/puffer-harness. One rule for every cache (builds, runtime identities); raises
    RuntimeError when there is no home to put it in."""
    base = os.environ.get("HARNESS_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "puffer-harness"
