"""What an ELF file was found to be is kept on disk (sampling/identity_cache.py): a second
harness process meeting the same libgomp does not read it with pyelftools, nor import
pyelftools. The hostile cases are real: files rewritten in place (with their mtime put back),
cache files truncated, garbage, oversized, of another schema, symlinked, a FIFO, a folder
that is a file, a full disk (RLIMIT_FSIZE). Each cache file that must be ignored carries a
lie (libc "defines GOMP_parallel") that would be believed if it were read: the control test
shows that it is, as a valid file."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.sampling import identity_cache, runtimes
from harness.sampling.identity_cache import MAX_BYTES, MAX_ENTRIES, Facts, Store, key_of
from harness.sampling.runtimes import PROBES, READ_BUDGET, Identity, identify
from tests import facts

pytestmark = pytest.mark.needs_tool("gcc", why="finds GNU libgomp (gcc -print-file-name)")

CACHE_FILE = identity_cache.FILE_NAME


def _libgomp() -> Path:
    out = subprocess.run(
        ["gcc", "-print-file-name=libgomp.so.1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout.strip()
    path = Path(os.path.realpath(out))
    if not path.is_file():
        pytest.fail(f"gcc names no libgomp.so.1 file ({out!r})")
    return path


def _libc() -> Path:
    for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib/libc.so.6"):
        if os.path.isfile(p):
            return Path(os.path.realpath(p))
    pytest.fail("no glibc libc.so.6 in the usual places")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root of the test's own; this process starts with no cache, in memory or on
    disk (as a new harness process does)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    _new_process(monkeypatch)
    return root


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new harness process starts with: nothing in memory, the file not read yet."""
    monkeypatch.setattr(runtimes, "_cache", {})
    monkeypatch.setattr(runtimes, "_store", None)


# A second Python process, identifying the files named in argv with the cache root of its
# environment: prints what it found, whether pyelftools got imported, and how many times the
# cache file was read
IDENTIFY = """
import json, sys
from harness.sampling import runtimes
found = [runtimes.identify(p) for p in sys.argv[1:]]
print(json.dumps({
    "found": [None if f is None else [f.runtime, f.soname, f.why] for f in found],
    "elftools": sorted(m for m in sys.modules if m.split(".")[0] == "elftools")[:3],
    "loads": runtimes._disk().loads,
}))
"""


def _identify_in_subprocess(
    cache: Path, *paths: Path, preexec: Callable[[], None] | None = None
) -> dict[str, object]:
    env = {**os.environ, "HARNESS_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", IDENTIFY, *map(str, paths)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        preexec_fn=preexec,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def test_a_second_process_does_not_read_the_files(tmp_path: Path) -> None:
    """Two real processes identify libgomp, libc and a file that is not ELF: the first reads
    them with pyelftools, the second imports no pyelftools, reads the cache file once, and
    finds the same identities."""
    cache = tmp_path / "cache"
    files = (_libgomp(), _libc(), Path(sys.executable).resolve(), tmp_path / "notes.txt")
    files[3].write_text("not an ELF file\n")
    first = _identify_in_subprocess(cache, *files)
    second = _identify_in_subprocess(cache, *files)
    assert first["elftools"], "the first process reads the libraries with pyelftools"
    assert second["elftools"] == [], second
    assert second["found"] == first["found"]
    found = first["found"]
    assert isinstance(found, list) and found[0][0] == "libgomp" and found[1][0] == "glibc"
    assert found[3] is None
    assert first["loads"] == 1 and second["loads"] == 1
    assert (cache / CACHE_FILE).is_file()


def test_identify_process_warm_imports_no_pyelftools(tmp_path: Path) -> None:
    """The harness's own path (identify_process on a live process that maps libgomp):
    the second process finds every mapped file in the cache."""
    gomp = _libgomp()
    code = (
        f"import ctypes, sys; ctypes.CDLL({str(gomp)!r}); print('ok', flush=True); sys.stdin.read()"
    )
    target = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    probe = (
        "import json, sys; from harness.sampling import runtimes\n"
        f"found = runtimes.identify_process({target.pid})\n"
        "print(json.dumps({'gomp': [v.runtime for k, v in found.items() if v and 'gomp' in k],"
        " 'n': len(found), 'elftools': 'elftools' in sys.modules}))"
    )
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    try:
        assert target.stdout is not None and target.stdout.readline() == b"ok\n"
        runs = [
            subprocess.run(
                [sys.executable, "-c", probe],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=True,
            )
            for _ in range(2)
        ]
    finally:
        assert target.stdin is not None
        target.stdin.close()
        target.wait(timeout=30)
    cold, warm = (json.loads(r.stdout) for r in runs)
    assert cold["gomp"] == ["libgomp"] and cold["elftools"] is True
    assert warm == {**cold, "elftools": False}


def _flip_gomp_symbols(path: Path) -> None:
    """Rename GOMP_parallel and GOMP_barrier in the file's string table (same length, in
    place): the file keeps its size and no longer defines them."""
    data = path.read_bytes()
    assert b"GOMP_parallel\0" in data
    with open(path, "r+b") as f:  # in place: the same inode
        f.write(data.replace(b"GOMP_", b"XOMP_"))


def test_a_file_rewritten_in_place_is_a_miss(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libgomp is identified, then rewritten in place to define no GOMP_ symbol, its size
    kept and its mtime put back (as `cp -p` or `touch -r` would): a new process reads the
    new bytes, not the cached libgomp (the change time gives it away)."""
    lib = tmp_path / "libgomp.so.1"
    shutil.copyfile(_libgomp(), lib)
    before = os.stat(lib)
    found = identify(str(lib))
    assert found is not None and found.runtime == "libgomp"
    time.sleep(0.05)  # the kernel's timestamps are coarse (a tick): let ctime move
    _flip_gomp_symbols(lib)
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(lib)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    _new_process(monkeypatch)
    again = identify(str(lib))
    assert again is not None and again.runtime != "libgomp", again


def test_a_file_replaced_with_another_size_is_a_miss(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib.so"
    shutil.copyfile(_libgomp(), lib)
    assert (found := identify(str(lib))) is not None and found.runtime == "libgomp"
    shutil.copyfile(_libc(), lib)  # truncated and rewritten: the same inode, another size
    _new_process(monkeypatch)
    assert (again := identify(str(lib))) is not None and again.runtime == "glibc"


def _lie(libc: Path) -> dict[str, Any]:
    """A well-formed cache file that says libc defines GOMP_parallel (libc is "libgomp")."""
    key = key_of(os.stat(libc))
    entry = [*key, {"soname": "libc.so.6", "exports": ["GOMP_parallel"]}]
    return {"schema": 1, "budget": READ_BUDGET, "probes": list(PROBES), "entries": [entry]}


def test_control_a_valid_cache_file_is_believed(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The premise of the hostile cases: the lie, as a valid file, is read (so each case
    below, that is not misled, ignored the file rather than never looked)."""
    cache_dir.mkdir()
    (cache_dir / CACHE_FILE).write_text(json.dumps(_lie(_libc())))
    found = identify(str(_libc()))
    assert found is not None and found.runtime == "libgomp"


def _hostile(kind: str, libc: Path, cache: Path, tmp_path: Path) -> None:
    """Put a cache file of this kind at the cache's place."""
    lie = _lie(libc)
    text = json.dumps(lie)
    target = cache / CACHE_FILE
    if kind == "truncated":
        target.write_text(text[: len(text) // 2])
    elif kind == "garbage":
        target.write_bytes(os.urandom(4096))
    elif kind == "deep":  # enough nesting for a RecursionError in json
        target.write_text("[" * 200_000)
    elif kind == "oversized":  # the lie, padded past MAX_BYTES with blanks JSON allows
        target.write_text(text + " " * MAX_BYTES)
    elif kind == "schema":
        target.write_text(json.dumps({**lie, "schema": 2}))
    elif kind == "schema-true":  # true == 1 in Python: not a schema number
        target.write_text(json.dumps({**lie, "schema": True}))
    elif kind == "probes":
        target.write_text(json.dumps({**lie, "probes": ["GOMP_parallel"]}))
    elif kind == "unknown-export":
        entries = [[*lie["entries"][0][:5], {"soname": "x", "exports": ["GOMP_parallel", "y"]}]]
        target.write_text(json.dumps({**lie, "entries": entries}))
    elif kind == "extra-field":
        entry = [
            *lie["entries"][0][:5],
            {"soname": "x", "exports": ["GOMP_parallel"], "runtime": "libgomp"},
        ]
        target.write_text(json.dumps({**lie, "entries": [entry]}))
    elif kind == "float-key":
        entry = [float(v) for v in lie["entries"][0][:5]] + [lie["entries"][0][5]]
        target.write_text(json.dumps({**lie, "entries": [entry]}))
    elif kind == "too-many":
        entries = lie["entries"] * (MAX_ENTRIES + 1)
        target.write_text(json.dumps({**lie, "entries": entries}))
    elif kind == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(text)
        target.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "not-ours":
        target.write_text(text)
        os.chown(target, 65534, 65534)
    else:
        raise AssertionError(kind)


HOSTILE = [
    "truncated",
    "garbage",
    "deep",
    "oversized",
    "schema",
    "schema-true",
    "probes",
    "unknown-export",
    "extra-field",
    "float-key",
    "too-many",
    "symlink",
    "fifo",
    "not-ours",
]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_cache_file_is_ignored_and_replaced(
    kind: str, cache_dir: Path, tmp_path: Path
) -> None:
    if kind == "not-ours":
        facts.require_root("only root can give the file to another user")
    libc = _libc()
    cache_dir.mkdir()
    _hostile(kind, libc, cache_dir, tmp_path)
    t0 = time.monotonic()
    found = identify(str(libc))
    assert found is not None and found.runtime == "glibc", found  # not misled
    assert time.monotonic() - t0 < 10
    target = cache_dir / CACHE_FILE
    assert target.is_file() and not target.is_symlink(), "replaced by a regular file"
    fresh = identity_cache.parse(target.read_bytes(), PROBES, READ_BUDGET)
    assert fresh is not None and fresh[key_of(os.stat(libc))] == Facts(
        "libc.so.6", ("gnu_get_libc_version",)
    )
    if kind == "symlink":  # the link was replaced, not followed
        assert json.loads((tmp_path / "elsewhere.json").read_text()) == _lie(libc)


def test_a_cache_folder_that_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache root cannot be made (a file holds its name): identify still answers."""
    root = tmp_path / "cache"
    root.write_text("a file, not a folder\n")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    _new_process(monkeypatch)
    found = identify(str(_libgomp()))
    assert found is not None and found.runtime == "libgomp"
    assert root.read_text() == "a file, not a folder\n"


def _no_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_full_disk_is_a_silent_miss(tmp_path: Path) -> None:
    """Not one byte can be written (RLIMIT_FSIZE 0, EFBIG as on a full disk): a real
    process identifies, says nothing, leaves no temporary file; the next one reads again."""
    cache = tmp_path / "cache"
    full = _identify_in_subprocess(cache, _libgomp(), preexec=_no_file_size)
    assert full["found"] == [
        ["libgomp", "libgomp.so.1", "exports GOMP_parallel (SONAME libgomp.so.1)"]
    ]
    assert list(cache.iterdir()) == [], "no cache file, no temporary left"
    later = _identify_in_subprocess(cache, _libgomp())
    assert later["elftools"] and later["found"] == full["found"]


def test_a_read_only_cache_folder(tmp_path: Path) -> None:
    """The cache root is read-only (a 0o555 folder; for root, whom the mode does not stop,
    a read-only tmpfs in a private mount namespace): a real process identifies, silently."""
    root = tmp_path / "cache"
    root.mkdir()
    argv = [sys.executable, "-c", IDENTIFY, str(_libgomp())]
    if os.geteuid() == 0:
        unshare = facts.require_tool("unshare", why="a read-only tmpfs for root")
        script = f'mount -t tmpfs -o ro,size=64k tmpfs "{root}" && exec "$@"'
        argv = [unshare, "--mount", "sh", "-c", script, "sh", *argv]
    else:
        root.chmod(0o555)
    env = {**os.environ, "HARNESS_CACHE_DIR": str(root)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    root.chmod(0o755)
    if os.geteuid() == 0 and "mount" in done.stderr and done.returncode != 0:
        facts.missing("a private mount namespace (unshare --mount)", done.stderr.strip())
    assert done.returncode == 0 and done.stderr == "", done.stderr
    found = json.loads(done.stdout)["found"]
    assert found == [["libgomp", "libgomp.so.1", "exports GOMP_parallel (SONAME libgomp.so.1)"]]
    assert list(root.iterdir()) == []


def test_the_oldest_entries_are_dropped(tmp_path: Path) -> None:
    """The file holds at most MAX_ENTRIES: the least recently used go first."""
    path = tmp_path / CACHE_FILE
    store = Store(path, PROBES, READ_BUDGET)
    for i in range(MAX_ENTRIES + 10):
        store.put((1, i, 1, 0, 0), Facts(f"lib{i}.so", ()))
        if i == 20:
            assert store.get((1, 0, 1, 0, 0))[0]  # entry 0 used again: kept
    store.flush()
    assert path.stat().st_size < MAX_BYTES
    again = Store(path, PROBES, READ_BUDGET)
    assert again.get((1, 0, 1, 0, 0)) == (True, Facts("lib0.so", ()))
    assert again.get((1, 1, 1, 0, 0)) == (False, None)  # among the oldest: dropped
    assert again.get((1, MAX_ENTRIES + 9, 1, 0, 0))[0]
    parsed = identity_cache.parse(path.read_bytes(), PROBES, READ_BUDGET)
    assert parsed is not None and len(parsed) == MAX_ENTRIES
    assert again.loads == 1


def test_read_once_and_written_once_per_call(cache_dir: Path) -> None:
    """Many files identified through one call of identify_process: the file read once, and
    written once (its inode changes with each atomic write)."""
    found = runtimes.identify_process(os.getpid())
    assert sum(v is not None for v in found.values()) >= 2
    first = os.stat(cache_dir / CACHE_FILE).st_ino
    runtimes.identify_process(os.getpid())  # nothing new: nothing written
    assert os.stat(cache_dir / CACHE_FILE).st_ino == first
    assert runtimes._disk().loads == 1


def test_the_cache_root_is_the_build_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same root as the build cache's (harness.build.cache_root), env or home."""
    from harness.build import cache_root

    monkeypatch.delenv("HARNESS_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert identity_cache.default_path() == cache_root() / CACHE_FILE
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert identity_cache.default_path() == cache_root() / CACHE_FILE


def test_identity_unchanged_by_the_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What is read back is classified again: the same Identity as a fresh read."""
    cold = identify(str(_libgomp()))
    _new_process(monkeypatch)
    warm = identify(str(_libgomp()))
    assert (
        cold
        == warm
        == Identity("libgomp", "libgomp.so.1", "exports GOMP_parallel (SONAME libgomp.so.1)")
    )
