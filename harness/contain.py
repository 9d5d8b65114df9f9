"""Path containment: every path that comes from a pin, a scenario, a transform, a patch, a
variant name or a report is resolved and confined to the folder it is meant to be in (the
build copy, the source tree, the pin's folder, the report folder) before anything reads or
writes it.

A path refused here ends as one line, `HarnessError(..., USAGE)`, that starts with `what`:
the caller's description of where the path came from (the file and the key, or the
variant), so the user knows which line of which file to fix.

The rules, in order:
1. the path is relative (an absolute path is refused: `root / "/etc/x"` IS "/etc/x");
2. lexically it never climbs above the root (`a/../b` is fine, `../x` and `a/../../x` are
   not), and holds no NUL byte (which the OS would cut the name at);
3. resolved against the real root, following every symlink that exists now, it is still
   inside the real root (a link `src/x.h -> /home/user/x`, or a chain of links that ends
   outside, is refused; a link that stays inside is allowed). A component that does not
   exist yet is taken as written (a file about to be created).

TOCTOU: between the check and the use a component could be swapped for a link. The
folders written here (the build copy, the report folder) are the harness's own scratch
folders, which nothing else writes during a run, so resolving and checking right before
the use is enough; the final component is still opened with O_NOFOLLOW, so a file swapped
for a link at the last moment fails instead of being followed. Reads of the user's source
tree are reads: the worst a race can do there is make a hash differ.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from harness.errors import HarnessError
from harness.outcome import USAGE

# how much a confined read takes unless told: config files and headers are small; a link to
# /dev/zero that got past a check must still not fill memory
DEFAULT_READ_LIMIT = 64 * 1024 * 1024


def refuse(what: str, rel: str | os.PathLike[str], why: str) -> HarnessError:
    """The one-line error for a refused path (returned, for the caller to raise)."""
    return HarnessError(f"{what}: path {str(rel)!r} refused: {why}", USAGE)


def lexical_problem(rel: str) -> str | None:
    """Why `rel` cannot name a file under a root, judged on the text alone; None when it
    can. Shared by the resolving check below and by checks of paths that have no root on
    this machine yet (a patch's paths, before it is applied)."""
    if not rel:
        return "an empty path"
    if "\0" in rel:
        return "it contains a NUL byte"
    if rel.startswith("/") or PurePosixPath(rel).is_absolute() or Path(rel).is_absolute():
        return "an absolute path (it must be relative to its folder)"
    depth = 0
    for part in PurePosixPath(rel).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return "'..' climbs out of its folder"
        elif part not in ("", "."):
            depth += 1
    return None


def confined(root: Path, rel: str | os.PathLike[str], *, what: str) -> Path:
    """`root / rel`, resolved (no symlinks left in it, as of now), after checking that it
    stays inside `root`; else a HarnessError naming `what`. `rel` need not exist (a write
    may create it); its existing components are followed."""
    text = os.fspath(rel)
    problem = lexical_problem(text)
    if problem is not None:
        raise refuse(what, text, problem)
    try:
        base = root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise refuse(what, text, f"its folder {root} cannot be resolved: {exc}") from exc
    try:
        # strict=False: components that do not exist yet are kept as written; every one
        # that exists is followed if it is a link, so a chain of links is judged by its end
        resolved = (base / text).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise refuse(what, text, f"it cannot be resolved: {exc}") from exc
    if not resolved.is_relative_to(base):
        raise refuse(what, text, f"a symlink leads out of {root} (to {resolved})")
    return resolved


def is_inside(root: Path, rel: str | os.PathLike[str]) -> bool:
    """Whether `confined` would accept `rel` (for callers that skip with a note)."""
    try:
        confined(root, rel, what="")
    except HarnessError:
        return False
    return True


def _open_regular(path: Path, what: str) -> int:
    """A read-only descriptor of `path` if it is a regular file (not a link, FIFO, device or
    folder). O_NONBLOCK so that opening a FIFO does not wait for a writer; O_NOFOLLOW so a
    link put in its place after the check is refused, not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise refuse(what, path, f"cannot be opened: {exc.strerror or exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise refuse(what, path, "not a regular file (a FIFO, device, socket or folder)")
    os.set_blocking(fd, True)
    return fd


def read_regular(path: Path, *, what: str, limit: int = DEFAULT_READ_LIMIT) -> bytes:
    """The bytes of a regular file, at most `limit` of them (more is refused, not cut:
    a half-read config would be misread)."""
    fd = _open_regular(path, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise refuse(what, path, f"larger than {limit} bytes")
    return data


def open_regular(path: Path, *, what: str) -> int:
    """A descriptor of a regular file for a caller that streams it (hashing); the caller
    closes it (os.fdopen(fd, "rb") takes it over)."""
    return _open_regular(path, what)


def write_confined(root: Path, rel: str | os.PathLike[str], data: bytes, *, what: str) -> Path:
    """Replace the contents of `root / rel` (confined) with `data`. The final component is
    opened with O_NOFOLLOW: a link there is refused, never written through."""
    path = confined(root, rel, what=what)
    # no O_TRUNC before the type is known: a FIFO or a device is refused untouched
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise refuse(what, rel, f"cannot be written: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refuse(what, rel, "not a regular file (a FIFO, device, socket or folder)")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "wb") as fh:
        fh.truncate(0)
        fh.write(data)
    return path
