"""What ELF files were found to be, kept on disk between harness processes.

Every `harness run`/`watch`/`attach` identifies the same few libraries (libc, libgomp,
libtorch_cpu …); reading them with pyelftools costs ~0.3 CPU-s a process, most of it
importing pyelftools. One small JSON file under the harness's cache root remembers, per
file, the facts read from it: its DT_SONAME and which of the probed symbols it defines (or
that it is not an ELF file one can read). The facts, not the verdict: `classify` runs again
on them, so a harness whose classification changed reads no stale answer.

A file is known by (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of the descriptor
actually read, so a file replaced or rewritten since is a miss (ctime too: a rewrite that
restores the mtime, `cp -p`, `touch -r`, still changes it). The cache file is a cache and
nothing more: one that is absent, a symlink, not ours, oversized, truncated, garbage, or of
another schema is ignored whole (and replaced at the next write), and one that cannot be
written (read-only folder, full disk) is a silent miss.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from harness import files
from harness.files import atomic_write

# Bump when what is read from a file changes (the reader, not classify: classify reruns)
SCHEMA = 1
FILE_NAME = "runtime-identities.json"
MAX_ENTRIES = 512  # a torch process maps ~150 files; oldest dropped past this
MAX_BYTES = 256 << 10  # 512 entries take ~80 KiB; a bigger file is not ours to parse
MAX_TEXT = 512  # a SONAME longer than this is not kept (nor trusted when read)

Key = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


@dataclass(frozen=True)
class Facts:
    """What was read from one ELF file."""

    soname: str
    exports: tuple[str, ...]  # of the probed symbols, those it defines, in probe order


def key_of(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def default_path() -> Path | None:
    """The cache file under the harness's cache root (`files.cache_home`, the build cache's
    too). None when there is no home to put it in."""
    try:
        return files.cache_home() / FILE_NAME
    except RuntimeError:  # no HOME and no passwd entry
        return None


def _read_bounded(path: Path) -> bytes | None:
    """The cache file's bytes when it is a regular file of ours (or root's), not a symlink,
    and at most MAX_BYTES; else None. Opened non-blocking: a FIFO planted there must not hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        # another user's file (a shared HARNESS_CACHE_DIR) could say anything; root's is
        # the one `sudo harness …` left in the user's cache
        mine = st.st_uid in (os.geteuid(), 0)
        if not stat.S_ISREG(st.st_mode) or not mine or st.st_size > MAX_BYTES:
            return None
        chunks, size = [], 0
        while size <= MAX_BYTES and (chunk := os.read(fd, MAX_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        return None if size > MAX_BYTES else b"".join(chunks)  # it grew while read
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_int(v: object, low: int | None = 0) -> bool:
    return type(v) is int and (low is None or v >= low)


def _is_text(v: object) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _entry(item: object, probes: tuple[str, ...]) -> tuple[Key, Facts | None] | None:
    """One entry, [dev, ino, size, mtime_ns, ctime_ns, facts-or-null], checked strictly;
    None when anything in it is off."""
    if not isinstance(item, list) or len(item) != 6:
        return None
    *numbers, found = item
    dev, ino, size, mtime, ctime = numbers
    if not (_is_int(dev) and _is_int(ino) and _is_int(size)):
        return None
    if not (_is_int(mtime, None) and _is_int(ctime, None)):  # before 1970 is negative
        return None
    key = (dev, ino, size, mtime, ctime)
    if found is None:
        return key, None
    if not isinstance(found, dict) or set(found) != {"soname", "exports"}:
        return None
    soname, exports = found["soname"], found["exports"]
    if not _is_text(soname) or not isinstance(exports, list):
        return None
    if not all(isinstance(e, str) and e in probes for e in exports):
        return None
    if len(set(exports)) != len(exports):
        return None
    ordered = tuple(p for p in probes if p in exports)
    return key, Facts(soname, ordered)


def parse(data: bytes, probes: tuple[str, ...], budget: int) -> dict[Key, Facts | None] | None:
    """The entries of a cache file's bytes, oldest first; None when the file is not one this
    harness wrote with these probes and this read budget (then it is ignored whole)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    # garbage, bad UTF-8, nesting deep enough for RecursionError: all mean "not ours"
    except Exception:
        return None
    if not isinstance(doc, dict) or set(doc) != {"schema", "budget", "probes", "entries"}:
        return None
    if not (_is_int(doc["schema"]) and doc["schema"] == SCHEMA):
        return None
    if not (_is_int(doc["budget"]) and doc["budget"] == budget and doc["probes"] == list(probes)):
        return None
    items = doc["entries"]
    if not isinstance(items, list) or len(items) > MAX_ENTRIES:
        return None
    out: dict[Key, Facts | None] = {}
    for item in items:
        entry = _entry(item, probes)
        if entry is None:
            return None
        out[entry[0]] = entry[1]
    return out


class Store:
    """The cache file of one process: read once, lazily, on the first lookup; written (whole,
    atomically) by `flush` when something was added or the file read was not valid."""

    def __init__(self, path: Path | None, probes: tuple[str, ...], budget: int) -> None:
        self.path, self._probes, self._budget = path, probes, budget
        self._entries: OrderedDict[Key, Facts | None] | None = None
        self._dirty = False
        self.loads = 0  # times the file was read (the tests hold it to one)

    def _load(self) -> OrderedDict[Key, Facts | None]:
        if self._entries is None:
            self.loads += 1
            data = None if self.path is None else _read_bounded(self.path)
            parsed = None if data is None else parse(data, self._probes, self._budget)
            self._entries = OrderedDict(parsed or {})
            # a file there that is not valid is replaced at the next write
            self._dirty = data is not None and parsed is None
        return self._entries

    def get(self, key: Key) -> tuple[bool, Facts | None]:
        """(known, facts): facts None with known True is "read before: not ELF"."""
        entries = self._load()
        if key not in entries:
            return False, None
        entries.move_to_end(key)  # recently used: the last to be dropped
        return True, entries[key]

    def put(self, key: Key, facts: Facts | None) -> None:
        if facts is not None and len(facts.soname) > MAX_TEXT:
            return  # would not be trusted when read back
        entries = self._load()
        entries[key] = facts
        entries.move_to_end(key)
        while len(entries) > MAX_ENTRIES:
            entries.popitem(last=False)
        self._dirty = True

    def flush(self) -> None:
        """Write the entries when they changed; a failure (read-only folder, full disk,
        RLIMIT_FSIZE) leaves the cache unwritten and says nothing: it is only a cache."""
        if not self._dirty or self._entries is None or self.path is None:
            return
        self._dirty = False
        items = [
            [*key, None if f is None else {"soname": f.soname, "exports": list(f.exports)}]
            for key, f in self._entries.items()
        ]
        doc = {
            "schema": SCHEMA,
            "budget": self._budget,
            "probes": list(self._probes),
            "entries": items,
        }
        with contextlib.suppress(OSError):
            atomic_write(self.path, json.dumps(doc, separators=(",", ":")))
