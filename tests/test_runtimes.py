"""Runtimes recognised by what they are (their ELF SONAME and exported symbols), not by
their file names: a wheel's renamed libgomp, Intel's libiomp5 and LLVM's libomp told apart,
and a library merely named libgomp.so not taken for one. Every library here is a real ELF
file: the system libgomp copied and renamed the way auditwheel vendors it, the wheels'
own copies, small libraries built with gcc for the shapes this host has no copy of."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import GNUHashSection
from elftools.elf.sections import StringTableSection

from harness.analysis.views import OPENMP_MODULES, uses
from harness.config.signatures import load_signatures, pattern_from_table
from harness.errors import HarnessError
from harness.outcome import Kind
from harness.sampling import runtimes
from harness.sampling.identity_cache import Store
from harness.sampling.model import Frame, SampleSet, ThreadStack
from harness.sampling.runtimes import (
    OPENMP_RUNTIMES,
    PROBES,
    READ_BUDGET,
    identify,
    identify_process,
    label_stacks,
)
from harness.sampling.sample import sample_tree
from harness.vocab import StackToolName
from tests import facts
from tests.harness_cli import samples_of, verdict_of, watch_cmd, watch_opts

pytestmark = pytest.mark.needs_tool("gcc", why="builds the OpenMP programs and libraries")

SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = SITE / "site-packages"
RENAMED = "libgomp-1a2b3c4d.so.1.0.0"  # auditwheel's shape: <name>-<8 hex>.so.<version>
# The copy's SONAME, rewritten in place (it must fit where "libgomp.so.1" was): auditwheel
# sets it to the new file name; this one does not say "gomp" at all, so nothing but the
# exported symbols can tell what the library is
SONAME = "libq-1a2b3c4"

# An OpenMP team in the parent, then fork(); the child enters a region of its own, which
# GNU libgomp cannot start in the child of a fork taken after a team ran: the child hangs
# in child_work's region while the parent waits for it.
FORK_AFTER_TEAM = r"""
#include <omp.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int parent_work(void) {
    int team = 0;
#pragma omp parallel num_threads(4)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    return team;
}

static int child_work(void) {
    int team = 0;
#pragma omp parallel num_threads(4)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    return team;
}

int main(void) {
    printf("parent team=%d\n", parent_work());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(child_work() == 4 ? 0 : 1);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
"""


@pytest.fixture(scope="module", autouse=True)
def own_identity_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's own cache root (the on-disk identity cache, runtimes._store, and that of
    the `harness` processes it starts), started empty: the user's cache is not touched."""
    root = tmp_path_factory.mktemp("identity-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_CACHE_DIR", str(root))
        mp.setattr(runtimes, "_cache", {})
        mp.setattr(runtimes, "_store", None)
        yield root


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr}"


def _system_libgomp() -> Path:
    out = subprocess.run(
        ["gcc", "-print-file-name=libgomp.so.1"], capture_output=True, text=True, check=False
    ).stdout.strip()
    path = Path(os.path.realpath(out))
    if not path.is_file() or identify(str(path)) is None:
        facts.missing("GNU libgomp (gcc -fopenmp's runtime)", "the renamed copy is made of it")
    return path


def _rewrite_soname(path: Path, soname: str) -> None:
    """Overwrite DT_SONAME's string in .dynstr in place (as patchelf --set-soname does,
    without growing the table: the new name must fit in the old one's bytes)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        tag = next(dynamic.iter_tags("DT_SONAME"))
        strtab = elf.get_section(dynamic["sh_link"])
        assert isinstance(strtab, StringTableSection)
        offset = strtab["sh_offset"] + tag["d_val"]
        old = strtab.get_string(tag["d_val"])
    assert len(soname) <= len(old), (soname, old)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(soname.encode() + b"\0" * (len(old) - len(soname) + 1))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """fake_pkg.libs/libgomp-1a2b3c4d.so.1.0.0 (SONAME libq-1a2b3c4), the fork program
    linked against it (rpath $ORIGIN/fake_pkg.libs), and the decoy libraries."""
    root = tmp_path_factory.mktemp("runtimes")
    libs = root / "fake_pkg.libs"
    libs.mkdir()
    renamed = libs / RENAMED
    shutil.copyfile(_system_libgomp(), renamed)
    _rewrite_soname(renamed, SONAME)
    (libs / SONAME).symlink_to(RENAMED)  # what the loader looks for: the DT_NEEDED name
    src = root / "fork_after_team.c"
    src.write_text(FORK_AFTER_TEAM)
    obj = root / "fork_after_team.o"
    _run("gcc", "-g", "-O0", "-fopenmp", "-c", "-o", str(obj), str(src))
    program = root / "fork_after_team"
    # no -fopenmp at the link: it would add the system -lgomp
    _run(
        "gcc", "-pthread", "-o", str(program), str(obj), str(renamed),
        "-Wl,-rpath,$ORIGIN/fake_pkg.libs",
    )  # fmt: skip
    out = {"libs": libs, "renamed": renamed, "program": program}
    # decoys and the runtimes this host has no copy of: (file, soname, symbols defined)
    decoys = {
        "fake_libgomp": ("libgomp.so.1", "libgomp.so.1", ["not_openmp"]),
        "libiomp5": ("libiomp5.so", "libiomp5.so", ["__kmpc_fork_call", "kmp_set_blocktime"]),
        "libomp": (
            "libomp.so.5",
            "libomp.so.5",
            ["__kmpc_fork_call", "kmp_set_blocktime", "GOMP_parallel", "GOMP_barrier"],
        ),
        "openmpi": (
            "libmpi.so.40",
            "libmpi.so.40",
            ["MPI_Send", "PMPI_Send", "ompi_mpi_comm_world"],
        ),
        "nccl": ("libnccl.so.2", "libnccl.so.2", ["ncclAllReduce"]),
    }
    for key, (name, soname, symbols) in decoys.items():
        folder = root / key
        folder.mkdir()
        c = folder / "lib.c"
        c.write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in symbols))
        out[key] = folder / name
        _run("gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out[key]), str(c))
    return out


@pytest.fixture
def fork_program(built: dict[str, Path]) -> Iterator[subprocess.Popen[bytes]]:
    """The fork program, running until its child hangs in its region; killed after."""
    proc = subprocess.Popen([str(built["program"])], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"parent team=4")
        yield proc
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_renamed_libgomp_known_by_its_symbols(built: dict[str, Path]) -> None:
    found = identify(str(built["renamed"]))
    assert found is not None and found.runtime == "libgomp", found
    assert found.soname == SONAME and "GOMP_parallel" in found.why
    # the premise: neither the file name nor the SONAME says libgomp to a name pattern
    assert not OPENMP_MODULES.search(RENAMED) and not OPENMP_MODULES.search(SONAME)


def test_openmp_runtimes_told_apart(built: dict[str, Path]) -> None:
    """Intel's and LLVM's runtimes export the same __kmpc_/kmp_ entry points (and LLVM's
    the GOMP_ ones too): the SONAME tells them apart."""
    got = {k: identify(str(built[k])) for k in ("libiomp5", "libomp", "openmpi", "nccl")}
    runtimes_of = {k: (v.runtime if v else None) for k, v in got.items()}
    assert runtimes_of == {
        "libiomp5": "libiomp5",
        "libomp": "libomp",
        "openmpi": "openmpi",
        "nccl": "nccl",
    }


def test_a_library_named_libgomp_is_not_libgomp(built: dict[str, Path]) -> None:
    """A file named libgomp.so.1 (SONAME too) that exports no GOMP_ symbol is an ELF file
    of no known runtime; frames in it are not OpenMP frames, nor the libgomp signature's."""
    found = identify(str(built["fake_libgomp"]))
    assert found is not None and found.runtime == "" and found.soname == "libgomp.so.1"
    frame = Frame("??", str(built["fake_libgomp"]), runtime=found.runtime)
    assert uses([frame], OPENMP_MODULES) is None
    [no_symbols] = [p for p in load_signatures().runtime if p.name == "libgomp (no symbols)"]
    assert not no_symbols.matches(frame)
    # the same frame from an older report (not examined): its file name still decides
    assert no_symbols.matches(Frame("??", str(built["fake_libgomp"])))


def test_non_openmp_libraries_are_not_openmp() -> None:
    libc = identify("/lib/x86_64-linux-gnu/libc.so.6") or identify("/lib64/libc.so.6")
    assert libc is not None and libc.runtime == "glibc"
    python = identify(os.path.realpath(sys.executable))
    assert python is not None and python.runtime not in OPENMP_RUNTIMES
    assert identify("/etc/hostname") is None  # not ELF


def test_truncated_and_hostile_files(built: dict[str, Path], tmp_path: Path) -> None:
    """A truncated copy and a copy whose hash table claims 2^31 buckets over a sparse
    512 MiB file: not an answer, and not a long read (the read budget stops it)."""
    data = built["renamed"].read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:3000])
    assert identify(str(cut)) is None
    huge = tmp_path / "huge.so"
    huge.write_bytes(data)
    with open(huge, "rb") as f:
        elf = ELFFile(f)
        gnu = next(s for s in elf.iter_sections() if isinstance(s, GNUHashSection))
        at = gnu["sh_offset"]  # nbuckets is the first word of the table
    with open(huge, "r+b") as f:
        f.seek(at)
        f.write((0x7FFFFFFF).to_bytes(4, "little"))
    os.truncate(huge, 512 << 20)
    t0 = time.monotonic()
    assert identify(str(huge)) is None
    assert time.monotonic() - t0 < 10


def _frames_in(s: SampleSet, name: str) -> list[Frame]:
    return [f for st in s.stacks for f in st.frames if f.module and f.module.endswith(name)]


@pytest.mark.slow
def test_sampler_labels_the_renamed_libgomp(
    built: dict[str, Path], fork_program: subprocess.Popen[bytes]
) -> None:
    """Under the sampler, the frames in the renamed copy carry runtime "libgomp", so the
    OpenMP checks find the child's region; frames in libc carry "glibc"."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _children(fork_program.pid):
        time.sleep(0.05)
    time.sleep(0.5)  # the child reaches its region
    maps = runtimes.mapped_files(_children(fork_program.pid)[0])
    assert any(p.endswith(RENAMED) for p in maps), "the program must map the renamed copy"
    assert not any(p.endswith("/libgomp.so.1.0.0") for p in maps)
    s = sample_tree(fork_program.pid, snapshots=1, interval=0.1)
    gomp = _frames_in(s, RENAMED)
    assert gomp and all(f.runtime == "libgomp" for f in gomp), [f.module for f in gomp]
    libc = [f for st in s.stacks for f in st.frames if f.module and "/libc.so" in f.module]
    assert libc and all(f.runtime == "glibc" for f in libc)
    child = _children(fork_program.pid)[0]
    child_frames = [f for st in s.stacks if st.pid == child for f in st.frames]
    assert uses(child_frames, OPENMP_MODULES) == f"{RENAMED} (libgomp)"
    assert "runtimes" in s.timings


def _children(pid: int) -> list[int]:
    text = (
        Path(f"/proc/{pid}/task/{pid}/children").read_text()
        if Path(f"/proc/{pid}").exists()
        else ""
    )
    return [int(p) for p in text.split()]


def test_label_stacks_reads_only_what_the_process_maps(
    built: dict[str, Path], fork_program: subprocess.Popen[bytes]
) -> None:
    """A frame naming a file the process does not map is left unlabelled (the file is never
    opened), one naming the mapped copy through its symlink is labelled."""
    frames = [
        Frame("??", str(built["libs"] / SONAME)),  # the symlink the loader followed
        Frame("??", str(built["libiomp5"])),  # a runtime, but not mapped by this process
    ]
    stack = ThreadStack(fork_program.pid, fork_program.pid, "x", frames, StackToolName.EU_STACK)
    notes: list[str] = []
    label_stacks([stack], notes)
    assert [f.runtime for f in frames] == ["libgomp", None] and notes == []


def test_wheels_vendored_runtimes() -> None:
    """The runtimes the installed wheels ship: torch's own libgomp and libtorch_cpu, and
    scikit-learn's auditwheel-renamed libgomp."""
    # find_spec, not an import: torch takes seconds to import on a loaded host
    if importlib.util.find_spec("torch") is None:
        facts.missing("the Python module torch", "torch ships its own libgomp and libtorch_cpu")
    torch_gomp = sorted(glob.glob(str(SITE / "torch" / "lib" / "libgomp*.so*")))
    assert torch_gomp, "torch/lib/libgomp*.so*"
    found = identify(torch_gomp[0])
    assert found is not None and found.runtime == "libgomp"
    torch_cpu = identify(str(SITE / "torch" / "lib" / "libtorch_cpu.so"))
    assert torch_cpu is not None and torch_cpu.runtime == "torch"
    if importlib.util.find_spec("sklearn") is None:
        facts.missing("the Python module sklearn", "it vendors libgomp renamed by auditwheel")
    vendored = sorted(glob.glob(str(SITE / "scikit_learn.libs" / "libgomp-*.so*")))
    assert vendored, "scikit_learn.libs/libgomp-<hash>.so*"
    found = identify(vendored[0])
    assert found is not None and found.runtime == "libgomp" and found.soname.startswith("libgomp-")


@pytest.mark.slow
def test_identifies_a_torch_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file a torch process maps (its libgomp, libtorch_cpu, glibc, libstdc++),
    cold, within a few seconds on a loaded two-core host."""
    facts.require_module("torch", "the process to identify imports torch")
    code = "import sys, torch; torch.ones(4).sum(); print('ok', flush=True); sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ok\n"
        # cold, as a first harness process: nothing in memory, an empty cache on disk
        monkeypatch.setattr(runtimes, "_cache", {})
        monkeypatch.setattr(runtimes, "_store", Store(tmp_path / "c.json", PROBES, READ_BUDGET))
        t0 = time.monotonic()
        found = identify_process(proc.pid)
        took = time.monotonic() - t0
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    names = {v.runtime for v in found.values() if v is not None}
    assert {"libgomp", "torch", "glibc", "libstdc++", "libpython"} <= names, names
    assert took < 10, took


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_openmp_after_fork_with_the_renamed_libgomp(built: dict[str, Path], tmp_path: Path) -> None:
    """The end to end case: linked against the renamed copy, `harness watch` gives the
    openmp-after-fork cause, located in the child's OpenMP region."""
    opts = watch_opts(startup=4, stall=4, quiescent=2, timeout=60)
    res = watch_cmd(tmp_path / "r", str(built["program"]), opts=opts)
    report = res.loaded
    v = verdict_of(report)
    assert v.kind is Kind.HANG, v
    found = {c.id: c for c in v.causes}
    assert "openmp-after-fork" in found, (v.causes, res.stdout)
    assert f"{RENAMED} (libgomp)" in found["openmp-after-fork"].sentence
    assert v.location is not None and v.location.startswith("child_work"), v.location
    gomp = [
        f
        for st in samples_of(report).stacks
        for f in st.frames
        if (f.module or "").endswith(RENAMED)
    ]
    assert gomp and all(f.runtime == "libgomp" for f in gomp)


def test_signature_runtimes_are_checked() -> None:
    pattern = pattern_from_table({"name": "x", "runtimes": ["libgomp"]}, "t.toml")
    assert pattern.matches(Frame("??", "/x/libgomp-1a2b3c4d.so.1", runtime="libgomp"))
    assert not pattern.matches(Frame("??", "/x/libgomp.so.1", runtime=""))
    with pytest.raises(HarnessError, match="unknown runtime 'libgnu'"):
        pattern_from_table({"name": "x", "runtimes": ["libgnu"]}, "t.toml")


def test_module_patterns_see_the_canonical_name() -> None:
    """A pin's `modules` pattern written for a file name (libgomp\\.so.*) holds for the
    renamed copy once the sampler identified it."""
    pattern = pattern_from_table({"name": "x", "modules": [r"libgomp\.so.*"]}, "t.toml")
    assert pattern.matches(Frame("??", f"/w/fake_pkg.libs/{RENAMED}", runtime="libgomp"))
    assert not pattern.matches(Frame("??", f"/w/fake_pkg.libs/{RENAMED}"))
    assert not pattern.matches(Frame("??", "/lib/libc.so.6", runtime="glibc"))


def test_a_path_replaced_after_mapping_is_not_read_for_it(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """The library's path is replaced (rename over it: an upgrade while the process runs)
    by a file of no runtime: what the process maps is still libgomp (through map_files),
    or unknown where map_files is refused, never the replacement's "nothing"."""
    shutil.copytree(built["libs"], tmp_path / "fake_pkg.libs", symlinks=True)
    program = tmp_path / "fork_after_team"
    shutil.copy2(built["program"], program)
    proc = subprocess.Popen([str(program)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"parent team=4")
        mapped = tmp_path / "fake_pkg.libs" / RENAMED
        replacement = tmp_path / "replacement.so"
        shutil.copyfile(built["fake_libgomp"], replacement)
        os.replace(replacement, mapped)
        assert identify(str(mapped)) == runtimes.Identity("", "libgomp.so.1", "")
        frames = [Frame("??", str(mapped))]
        stack = ThreadStack(proc.pid, proc.pid, "x", frames, StackToolName.EU_STACK)
        label_stacks([stack], [])
        assert frames[0].runtime in ("libgomp", None)
        if os.geteuid() == 0:  # map_files opens the very file mapped
            assert frames[0].runtime == "libgomp"
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
