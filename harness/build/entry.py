"""A build cache entry that checks itself: its lock, the marker that records what the build
produced (size and sha256 of each declared output and of each config file the run reads, for
every env; the size of every other file of the built tree), the check of an entry against
its marker before use, and setting a damaged entry aside.

The marker is written atomically (by the builder, `harness.build`) and read here without
ever raising: any bytes at all (truncated, not UTF-8, not JSON, another shape, another key)
are a damaged entry. Files named in a marker are never read outside the entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.config.pin import Pin
from harness.contain import confined, is_inside, lexical_problem, open_regular
from harness.errors import HarnessError

MARKER = ".harness-build.json"
MARKER_FORMAT = 2  # 2: the marker records the entry's files (1, unversioned: it did not)
MARKER_MAX_BYTES = 64 << 20  # a marker listing a large tree (a venv) is a few MB
_SHA256 = re.compile(r"[0-9a-f]{64}")
IGNORED_NAMES = {".git", "logs", "checkpoints", "__pycache__", MARKER}


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (created, never removed: removing a lock file another
    process holds open would let a third lock a new file of the same name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _outside(rel: str) -> bool:
    """`rel` is not a plain relative path inside its folder (absolute, `..` out, NUL)."""
    return lexical_problem(rel) is not None


def _sha256(root: Path, rel: str) -> str:
    """sha256 of the regular file `root / rel`, links inside `root` followed, none out."""
    digest = hashlib.sha256()
    fd = open_regular(confined(root, rel, what="build cache"), what="build cache")
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _checked_files(tree: Path, pin: Pin) -> list[str]:
    """The files whose content the cache checks: the declared outputs that are files, and
    the config files the run reads (`pin.config_files`, for every env) that the tree has."""
    rels = [o for o in pin.build_outputs if (tree / o).is_file()]
    for template in pin.config_files:
        for env in pin.envs if "{env}" in template else ("",):
            rel = template.replace("{env}", env)
            if rel not in rels and is_inside(tree, rel) and (tree / rel).is_file():
                rels.append(rel)
    return rels


def _tree_sizes(tree: Path) -> dict[str, int]:
    """Every regular file of the built tree and its size; links are not followed, and run
    artefacts (logs, checkpoints, __pycache__ at any depth) are left out: a run adds them."""
    sizes: dict[str, int] = {}
    for folder, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d not in IGNORED_NAMES]
        base = Path(folder).relative_to(tree)
        for name in files:
            if name in IGNORED_NAMES:
                continue
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(st.st_mode):
                sizes[(base / name).as_posix()] = st.st_size
    return sizes


def record(tree: Path, pin: Pin) -> dict[str, object]:
    """The marker's account of what the build produced (see the module docstring)."""
    sizes = _tree_sizes(tree)
    checked = {r: [(tree / r).stat().st_size, _sha256(tree, r)] for r in _checked_files(tree, pin)}
    return {"checked": checked, "sizes": {r: n for r, n in sizes.items() if r not in checked}}


@dataclass
class Entry:
    """A marker that parses: the entry's checked files (size, sha256), its other files' sizes."""

    checked: dict[str, tuple[int, str]]
    sizes: dict[str, int]
    built_at: str


def read_marker(marker: Path, key: str) -> Entry | str:
    """The entry's record, or why the marker cannot be trusted. Never raises: any bytes at
    all (truncated, not UTF-8, not JSON, another shape, another key) are a damaged marker."""
    try:
        st = os.lstat(marker)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MARKER_MAX_BYTES:
            return "its marker is not a regular file of a sane size"
        data = json.loads(marker.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8 or JSON
        return f"its marker is unreadable ({type(exc).__name__})"
    if not isinstance(data, dict):
        return f"its marker is a JSON {type(data).__name__}, not an object"
    if data.get("format") != MARKER_FORMAT:
        return f"its marker is of format {data.get('format', 1)!r}, not {MARKER_FORMAT}"
    if data.get("key") != key:
        return f"its marker is of another build (key {str(data.get('key'))[:24]!r})"
    checked_raw, sizes_raw = data.get("checked"), data.get("sizes")
    if not isinstance(checked_raw, dict) or not isinstance(sizes_raw, dict):
        return "its marker lacks its record of the files"
    entry = Entry({}, {}, str(data.get("built_at", "?")))
    for rel, value in checked_raw.items():
        match value:
            case [int(size), str(digest)] if _SHA256.fullmatch(digest) and not _outside(rel):
                entry.checked[rel] = (size, digest)
            case _:
                return f"its marker's record of {rel[:80]!r} is malformed"
    for rel, size in sizes_raw.items():
        if type(size) is not int or _outside(rel):
            return f"its marker's record of {rel[:80]!r} is malformed"
        entry.sizes[rel] = size
    return entry


def check_entry(final: Path, key: str, pin: Pin) -> Entry | str:
    """The record of the cache entry `final` when the entry is whole; else why it is not.
    Sizes first (a stat per file), then the hashes of the outputs and config files."""
    entry = read_marker(final / MARKER, key)
    if isinstance(entry, str):
        return entry
    for out in pin.build_outputs:
        if out not in entry.checked and not (final / out).exists():
            return f"output {out} is missing"
    # checked files may be links inside the tree (followed); the others are regular files
    sized = [(r, n, os.stat) for r, (n, _) in entry.checked.items()]
    for rel, size, look in [*sized, *((r, n, os.lstat) for r, n in entry.sizes.items())]:
        try:
            actual = look(final / rel).st_size
        except OSError:
            return f"{rel} is missing"
        if actual != size:
            return f"{rel} is {actual} bytes, the build made {size}"
    for rel, (_, digest) in entry.checked.items():
        try:
            if _sha256(final, rel) != digest:
                return f"{rel} changed since the build (sha256 differs)"
        except (HarnessError, OSError) as exc:  # a link out of the tree, not a file
            return f"{rel} cannot be checked ({exc})"
    return entry


# how long a damaged entry set aside is kept: a run of another harness may still be using it
# (its trainer's cwd), and a run may take that long
DAMAGED_KEEP_S = 24 * 3600.0


def set_aside(path: Path, may_be_in_use: bool) -> None:
    """Clear the way for a new build of the entry `path`: a finished entry that failed its
    check is renamed aside, not deleted (another harness's run may still run from it: its
    trainer's cwd), and deleted a day later; an unfinished one, which no run used, at once."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists() and not may_be_in_use:
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        aside = path.with_name(f".damaged-{path.name}-{secrets.token_hex(4)}")
        path.rename(aside)
        os.utime(aside)  # its age counts from now, not from when it was built
    now = time.time()
    for old in path.parent.glob(".damaged-*"):
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > DAMAGED_KEEP_S:
                shutil.rmtree(old, ignore_errors=True)
