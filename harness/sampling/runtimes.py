"""Which runtime a mapped shared object IS, by its ELF identity rather than its file name.

pip wheels ship their runtimes renamed (auditwheel: `scikit_learn.libs/libgomp-e985bcbb.so.1.0.0`,
its SONAME rewritten to match), so a file name says little. A library is known here by its
DT_SONAME and by the dynamic symbols it defines, looked up by name through its GNU (or SysV)
hash table with pyelftools: a handful of lookups, whatever the size of the symbol table
(libtorch_cpu defines ~100k symbols). The canonical names (`RUNTIMES`) are what
`Frame.runtime` holds; "" says "an ELF object, none of the runtimes known here".

Reads are bounded: at most `READ_BUDGET` bytes per file, and only files a process maps,
opened through /proc/PID/map_files (else its root) and checked to be the mapped inode, so a
path replaced since it was mapped is not read. What a file was found to be is cached by
(path, device, inode, size, mtime, ctime) for the life of the harness process, and without
the path across processes (`identity_cache`: a second harness process that meets the
same libgomp does not open it with pyelftools, nor import pyelftools).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from harness.sampling.identity_cache import Facts, Store, default_path, key_of
from harness.sampling.model import ThreadStack

# canonical runtime names, as Frame.runtime and a signature's `runtimes` spell them
RUNTIMES = (
    "libgomp",  # GNU OpenMP
    "libomp",  # LLVM OpenMP
    "libiomp5",  # Intel OpenMP (the same lineage as libomp; told apart by SONAME)
    "glibc",  # libc.so.6, the dynamic loader
    "libpthread",  # glibc's libpthread.so.0 (a stub since glibc 2.34)
    "libstdc++",
    "libpython",  # CPython: libpython3.X.so, or an interpreter linked statically
    "mpich",  # MPICH and its derivatives (Intel MPI, the `mpich` wheel)
    "openmpi",
    "mpi",  # an MPI library of another kind
    "nccl",
    "torch",  # libtorch*, libc10* (gloo and c10d are compiled into libtorch_cpu)
    "gloo",  # a standalone libgloo
    "harness-shim",  # SHIM_RUNTIME: the harness's own --hazards shim, never own code
)
OPENMP_RUNTIMES = frozenset({"libgomp", "libomp", "libiomp5"})
# the --hazards shim's wrappers sit between the program and libc (pthread_mutex_lock, fork):
# true frames, but neither the program's nor what it waits in, so never shown as its place
SHIM_RUNTIME = RUNTIMES[-1]
SHIM_EXPORT = "puffer_harness_hazards_shim"  # the symbol the shim exports (hazards.c) to be known

READ_BUDGET = 4 << 20  # bytes read per file at most (libtorch_cpu: 0.4 MiB, glibc 0.4 MiB)
MAX_FILES = 512  # (process, module) pairs resolved per call of label_stacks
CACHE_SIZE = 4096

# The symbols whose definition identifies a runtime, looked up by exact name.
PROBES = (
    SHIM_EXPORT,  # checked first: the shim exports GOMP_parallel too
    "__kmpc_fork_call",
    "kmp_set_blocktime",
    "GOMP_parallel",
    "GOMP_barrier",
    "MPI_Send",
    "PMPI_Send",
    "ompi_mpi_comm_world",  # Open MPI's MPI_COMM_WORLD
    "MPIR_Err_create_code",  # MPICH's internal error path, in every MPICH-derived libmpi
    "ncclAllReduce",
    "Py_Initialize",
    "PyEval_SaveThread",
    "gnu_get_libc_version",  # glibc's own; musl defines __libc_start_main too, not this
    "_ZSt4cout",  # std::cout in libstdc++'s ABI (libc++ has std::__1::cout)
    "__gxx_personality_v0",
)

# auditwheel's "-<8 hex>" (repeated when a wheel re-vendors: libgfortran-040039e1-0352e75f)
_AUDITWHEEL_HASH = re.compile(r"(-[0-9a-f]{8})+$")
_STEM_RUNTIMES = (
    (re.compile(r"libtorch(_\w+)?|libc10(_\w+)?"), "torch"),
    (re.compile(r"libgloo\w*"), "gloo"),
    (re.compile(r"libpthread"), "libpthread"),
    (re.compile(r"ld-linux[-\w]*|ld64"), "glibc"),
    (re.compile(r"libstdc\+\+"), "libstdc++"),
)


@dataclass(frozen=True)
class Identity:
    """What one ELF file is."""

    runtime: str  # a name of RUNTIMES, or "" for none of them
    soname: str  # DT_SONAME as written in the file, "" when it has none
    why: str  # "exports GOMP_parallel", "SONAME libtorch_cpu.so", "" for none


def soname_stem(name: str) -> str:
    """`libgomp-e985bcbb.so.1.0.0` → `libgomp`, `libiomp5.so` → `libiomp5`."""
    base = name.rsplit("/", 1)[-1]
    stem = base.split(".so", 1)[0]
    return _AUDITWHEEL_HASH.sub("", stem)


def classify(soname: str, exports: Iterable[str]) -> Identity:
    """The runtime a file with this SONAME that defines these symbols (of PROBES) is."""
    have = set(exports)
    stem = soname_stem(soname)
    said = f" (SONAME {soname})" if soname else ""
    if SHIM_EXPORT in have:
        return Identity(SHIM_RUNTIME, soname, f"exports {SHIM_EXPORT}{said}")
    if "__kmpc_fork_call" in have and "kmp_set_blocktime" in have:
        # libomp and libiomp5 both export the GOMP_ entry points too: checked first
        name = "libiomp5" if stem.startswith("libiomp") else "libomp"
        return Identity(name, soname, f"exports __kmpc_fork_call{said}")
    for symbol in ("GOMP_parallel", "GOMP_barrier"):
        if symbol in have:
            return Identity("libgomp", soname, f"exports {symbol}{said}")
    mpi = next((s for s in ("MPI_Send", "PMPI_Send") if s in have), None)
    if mpi:
        if "ompi_mpi_comm_world" in have:
            return Identity("openmpi", soname, f"exports {mpi}, ompi_mpi_comm_world")
        if "MPIR_Err_create_code" in have:
            return Identity("mpich", soname, f"exports {mpi}, MPIR_Err_create_code")
        return Identity("mpi", soname, f"exports {mpi}")
    for symbol, name in (
        ("ncclAllReduce", "nccl"),
        ("Py_Initialize", "libpython"),
        ("PyEval_SaveThread", "libpython"),
        ("gnu_get_libc_version", "glibc"),
    ):
        if symbol in have:
            return Identity(name, soname, f"exports {symbol}{said}")
    for rx, name in _STEM_RUNTIMES:
        if stem and rx.fullmatch(stem):
            return Identity(name, soname, f"SONAME {soname}")
    if {"_ZSt4cout", "__gxx_personality_v0"} <= have:
        return Identity("libstdc++", soname, f"exports std::cout{said}")
    return Identity("", soname, "")


class _OverBudget(Exception):
    pass


class _Bounded(io.RawIOBase):
    """An open file read with pread, refusing to read more than `budget` bytes in all."""

    def __init__(self, fd: int, size: int, budget: int) -> None:
        self._fd, self._size, self._left, self._pos = fd, size, budget, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), max(0, self._size - self._pos))
        if want > self._left:
            raise _OverBudget
        data = os.pread(self._fd, want, self._pos)
        buffer[: len(data)] = data
        self._left -= len(data)
        self._pos += len(data)
        return len(data)


def _read_facts(fd: int, size: int) -> tuple[Facts | None, bool]:
    """(facts, settled) of the file open at fd: facts None when it is not ELF or cannot be
    read; settled False when that came of an I/O error, which may not recur (not remembered
    on disk, then)."""
    try:
        magic = os.pread(fd, 4, 0)
    except OSError:
        return None, False
    if magic != b"\x7fELF":  # locale-archive, a .pyc: no pyelftools import for them
        return None, True
    # pyelftools is imported where a file is read: 0.1 s off every start of the harness
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.hash import ELFHashSection, GNUHashSection

    stream = io.BufferedReader(_Bounded(fd, size, READ_BUDGET), buffer_size=4096)
    try:
        elf = ELFFile(stream)
        soname = ""
        hashes: list[GNUHashSection | ELFHashSection] = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                tags = section.iter_tags("DT_SONAME")
                # pyelftools sets `soname` on the tag (not in its type stubs)
                soname = next((str(getattr(t, "soname", "")) for t in tags), soname)
            elif isinstance(section, (GNUHashSection, ELFHashSection)):
                hashes.append(section)
        exports = []
        for name in PROBES:
            for table in hashes:
                symbol = table.get_symbol(name)
                # a SysV hash table lists undefined (imported) symbols too
                if symbol is not None and symbol["st_shndx"] != "SHN_UNDEF":
                    exports.append(name)
                    break
    except OSError:
        return None, False
    # pyelftools over bytes nobody vetted (a truncated copy, garbage with an ELF magic) fails
    # in many ways (ELFError, construct, struct, KeyError …): any of them means "unreadable",
    # and will again: the bytes are the same for the same (device, inode, size, times)
    except Exception:
        return None, True
    return Facts(soname, tuple(exports)), True


_cache: dict[tuple[str, int, int, int, int, int], Identity | None] = {}
_store: Store | None = None


def _disk() -> Store:
    """The on-disk cache of this process, made on first use (its file read on first get)."""
    global _store
    if _store is None:
        _store = Store(default_path(), PROBES, READ_BUDGET)
    return _store


def _identify_fd(fd: int, path: str) -> Identity | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    key = key_of(st)  # of the descriptor read: a file replaced since is another key
    if (path, *key) not in _cache:
        if len(_cache) >= CACHE_SIZE:
            _cache.clear()
        known, facts = _disk().get(key)
        if not known:
            facts, settled = _read_facts(fd, st.st_size)
            if settled:
                _disk().put(key, facts)
        _cache[(path, *key)] = None if facts is None else classify(facts.soname, facts.exports)
    return _cache[(path, *key)]


def identify(path: str) -> Identity | None:
    """The identity of the regular file at `path`, a path the caller chose (a process's
    files go through `identify_mapped`); None when it cannot be read or is not ELF."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _identify_fd(fd, path)
    finally:
        os.close(fd)
        _disk().flush()


@dataclass(frozen=True)
class Mapped:
    """A file a process maps, from /proc/PID/maps."""

    path: str
    inode: int
    span: str  # "7f00…-7f00…" of its first mapping, its name under /proc/PID/map_files


# /proc/PID/maps is read up to this size (~150 000 mappings): a process with millions of
# them (an allocator gone wild) must not make the sampler read and split hundreds of MiB; a
# file mapped past the cap is then not identified (its frames keep runtime None)
MAPS_LIMIT = 16 << 20


def read_maps(pid: int, limit: int = MAPS_LIMIT) -> str:
    """The text of /proc/PID/maps, at most `limit` bytes and whole lines only; "" when
    unreadable."""
    try:
        fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        chunks, size = [], 0
        while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        more = size >= limit and bool(os.read(fd, 1))
    except OSError:
        return ""
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if more:  # cut at the cap: drop the line it cut through
        data = data[: data.rfind(b"\n") + 1]
    return data.decode("utf-8", "replace")


def mapped_files(pid: int) -> dict[str, Mapped]:
    """The files the process maps, by path (each once); {} when its maps are unreadable.
    Read up to MAPS_LIMIT (read_maps)."""
    found: dict[str, Mapped] = {}
    for line in read_maps(pid).splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        # a file replaced since it was mapped (an upgrade under a running process) shows as
        # "PATH (deleted)": map_files still opens it, the inode check refuses the new file
        path = parts[5].removesuffix(" (deleted)")
        if path not in found and parts[4].isdigit() and parts[4] != "0":
            found[path] = Mapped(path, int(parts[4]), parts[0])
    return found


def identify_mapped(pid: int, m: Mapped) -> Identity | None:
    """The identity of a file the process maps. Opened through map_files (the very file
    mapped; it needs CAP_SYS_ADMIN), else through the process's root, else by path, and
    read only when it is the inode mapped. Not the device: overlayfs shows the
    underlying file's device in maps and its own to stat."""
    try:
        return _identify_mapped(pid, m)
    finally:
        _disk().flush()


def _identify_mapped(pid: int, m: Mapped) -> Identity | None:
    with open_mapped(pid, m) as fd:
        return None if fd is None else _identify_fd(fd, m.path)


@contextlib.contextmanager
def open_mapped(pid: int, m: Mapped) -> Iterator[int | None]:
    """An fd on the very file the process maps (None: none opens): through map_files (it
    needs CAP_SYS_ADMIN), else through the process's root, else by path, and only when it
    is the inode mapped. Not the device: overlayfs shows the underlying file's device in
    maps and its own to stat."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    candidates = (
        (f"/proc/{pid}/map_files/{m.span}", flags),  # a magic link: must be followed
        (f"/proc/{pid}/root{m.path}", flags | os.O_NOFOLLOW),
        (m.path, flags | os.O_NOFOLLOW),
    )
    for path, how in candidates:
        try:
            fd = os.open(path, how)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_ino == m.inode:
                yield fd
                return
        finally:
            os.close(fd)
    yield None


def identify_process(pid: int) -> dict[str, Identity | None]:
    """The identity of every file the process maps (None: unreadable or not ELF)."""
    try:
        return {path: _identify_mapped(pid, m) for path, m in mapped_files(pid).items()}
    finally:
        _disk().flush()  # once for all the files: one write of the cache file


def _resolve(
    module: str, maps: dict[str, Mapped], by_base: dict[str, list[Mapped]]
) -> Mapped | None:
    """The mapped file a tool's module path names: the tool may print the path it loaded
    (`/lib/x86_64-linux-gnu/libgomp.so.1`, a symlink) where maps has the file itself."""
    found = maps.get(module)
    if found is None and os.path.isabs(module):
        found = maps.get(os.path.realpath(module))
    if found is None:
        same = by_base.get(os.path.basename(module), [])
        found = same[0] if len(same) == 1 else None
    return found


def label_stacks(stacks: Iterable[ThreadStack], notes: list[str], budget_s: float = 5.0) -> None:
    """Set `runtime` on every frame whose module is a file its process maps and that was
    identified. Call while the processes are alive (their maps are read)."""
    try:
        _label(stacks, notes, budget_s)
    finally:
        _disk().flush()


def _label(stacks: Iterable[ThreadStack], notes: list[str], budget_s: float) -> None:
    deadline = time.monotonic() + budget_s
    by_pid: dict[int, list[ThreadStack]] = defaultdict(list)
    for st in stacks:
        if any(f.module for f in st.frames):
            by_pid[st.pid].append(st)
    seen: dict[tuple[int, str], Identity | None] = {}
    for pid, mine in by_pid.items():
        maps = mapped_files(pid)
        by_base: dict[str, list[Mapped]] = defaultdict(list)
        for m in maps.values():
            by_base[os.path.basename(m.path)].append(m)
        for frame in (f for st in mine for f in st.frames):
            module = frame.module
            if not module:
                continue
            if (pid, module) not in seen:
                if len(seen) >= MAX_FILES or time.monotonic() > deadline:
                    notes.append(f"runtimes: stopped after {len(seen)} modules (bound reached)")
                    return
                found = _resolve(module, maps, by_base)
                seen[pid, module] = None if found is None else _identify_mapped(pid, found)
            identity = seen[pid, module]
            if identity is not None:
                frame.runtime = identity.runtime
