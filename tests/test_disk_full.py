"""A full disk and an unusable --report-dir, for real: the verdict and its exit code always
reach the terminal; report.json is written first and brief, so the disk costs the big files,
not the verdict; a report folder that cannot hold a report is refused before anything runs.

The full disk is RLIMIT_FSIZE on the harness (a write past it fails with EFBIG, as one on a
full disk fails with ENOSPC: the harness ignores SIGXFSZ), set at its start or lowered to 0
while it runs; the read-only folder is a read-only tmpfs in a private mount namespace where
the tests run as root (root ignores permission bits), a chmod 0o555 folder elsewhere."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.outcome import INTERNAL_ERROR, USAGE, Kind, exit_code
from harness.report.load import load_report
from harness.vocab import Mechanism, RunStatus, Stage
from tests import facts
from tests.harness_cli import (
    ROOT,
    communicate_and_kill,
    only_report_dir,
    verdict_of,
    wait_for_trainer,
    watch_opts,
)

pytestmark = pytest.mark.timeout(120)
FAST = watch_opts(startup=3, stall=2, timeout=40, quiet=True)
HANG = exit_code(Kind.HANG)
# a full report.json of the mutex deadlock (every thread's stacks) takes some 25 KB, report.html
# some 20 KB, samples.json 17 KB; report.json without its samples some 5 KB
SMALL_DISK = 12 * 1024


@dataclass
class Ended:
    code: int
    stdout: str
    stderr: str
    root: Path  # the --report-dir

    @property
    def folder(self) -> Path | None:
        return only_report_dir(self.root)


def start(
    args: Sequence[str], preexec: Callable[[], None] | None = None, prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "harness", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=preexec,
    )


def finish(proc: subprocess.Popen[bytes], root: Path, timeout: float = 90) -> Ended:
    out, err = communicate_and_kill(proc, timeout)
    return Ended(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), root)


def file_size_limit(limit: int) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def watch(root: Path, program: Path, opts: Sequence[str] = FAST) -> list[str]:
    return ["watch", "--report-dir", str(root), *opts, "--", str(program)]


# ---------------------------------------------------------------- a full disk during a run


@pytest.mark.slow
def test_a_full_disk_costs_the_big_files_not_the_verdict(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    root = tmp_path / "reports"
    proc = start(watch(root, c_program("mutex_deadlock")), file_size_limit(SMALL_DISK))
    res = finish(proc, root)
    assert res.code == HANG, res.stderr  # the hang's code, not 70
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert "hang (deadlock)" in res.stdout  # the summary, with the one-line verdict
    assert res.folder is not None
    report = load_report(res.folder)
    assert report.status is RunStatus.COMPLETE
    v = verdict_of(report)
    assert (v.kind, v.mechanism) == (Kind.HANG, Mechanism.DEADLOCK)
    unwritten = report.unwritten
    # too big for the disk: the HTML page, the samples, the full report.json
    assert {"report.html", "samples.json", "report.json"} <= set(unwritten), unwritten
    assert all("EFBIG" in why for why in unwritten.values()), unwritten
    assert report.samples is None  # the brief report.json: its samples did not fit
    for name in unwritten:
        if name != "report.json":
            assert not (res.folder / name).exists(), name
            assert f"{name} not written: File too large (EFBIG)" in report.notes
    assert any("report.json written without its samples" in n for n in report.notes)
    # what fitted is there, whole: the stacks in text, the markdown report
    assert "transfer_" in (res.folder / "stacks.txt").read_text()
    assert (res.folder / "report.md").is_file()
    assert not [p for p in res.folder.iterdir() if p.name.startswith(".")]  # no half file
    # one line on stderr names what is missing and where the verdict is
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("harness: report incomplete")]
    assert len(lines) == 1, res.stderr
    assert "report.html" in lines[0] and "samples.json" in lines[0]
    assert str(res.folder / "report.json") in lines[0]
    assert not (root / "harness-internal-error.txt").exists()


@pytest.mark.slow
def test_a_disk_full_of_everything_still_gives_the_verdict(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """The disk fills up while the program runs: from then on not one byte can be written
    (RLIMIT_FSIZE lowered to 0 on the running harness). The verdict and its exit code
    still reach the terminal."""
    root = tmp_path / "reports"
    opts = watch_opts(startup=3, stall=3, timeout=40, quiet=True)
    proc = start(watch(root, c_program("mutex_deadlock"), opts))
    wait_for_trainer(proc, root, timeout=60)
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (0, 0))
    res = finish(proc, root)
    assert res.code == HANG, res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert "hang (deadlock)" in res.stdout
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("harness: report incomplete")]
    assert len(line) == 1, res.stderr
    assert "report.json not written (File too large (EFBIG))" in line[0]
    assert "the verdict above is all there is" in line[0]
    assert res.folder is not None
    # report.json is the one written before the limit: the run, still going then
    report = load_report(res.folder)
    assert (report.status, report.stage) == (RunStatus.RUNNING, Stage.RUN)
    for name in ("report.html", "samples.json", "report.md", "junit.xml", "stacks.txt"):
        assert not (res.folder / name).exists(), name


# ---------------------------------------------------------------- an unusable --report-dir


def refused(res: Ended, path: Path, why: str, cache: Path | None = None) -> None:
    """Exit USAGE, one line naming the path, before anything ran: no run folder, no build."""
    assert res.code == USAGE, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"harness: error: --report-dir {path}: {why}"), lines[0]
    if cache is not None:  # `harness run` would have built into it first
        assert not any(cache.iterdir()), list(cache.iterdir())


def run_breakout(report_dir: Path, cache: Path, prefix: Sequence[str] = ()) -> Ended:
    args = ["run", "breakout", "--report-dir", str(report_dir), "--timeout", "30", "--quiet"]
    env_cache = {"HARNESS_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "harness", *args],
        cwd=ROOT,
        env={**os.environ, **env_cache},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return finish(proc, report_dir)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    path = tmp_path / "cache"
    path.mkdir()
    return path


def test_a_report_dir_that_is_a_file_is_refused_before_the_build(
    tmp_path: Path, cache: Path
) -> None:
    target = tmp_path / "reports"
    target.write_text("not a folder\n")
    refused(run_breakout(target, cache), target, "not a folder", cache)
    assert target.read_text() == "not a folder\n"


def test_a_report_dir_that_cannot_be_created_is_refused(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "reports"
    refused(run_breakout(target, cache), target, "cannot be created: Not a directory", cache)


def private_mount(tmp_path: Path, options: str, then: str = ":") -> list[str]:
    """A prefix that runs the command in a private mount namespace where `tmp_path/mnt` is
    a fresh tmpfs mounted with `options` (`then`: a shell command run after the mount, with
    the mount point as $0); missing where this host cannot make one (no unshare, user
    namespaces refused)."""
    unshare = facts.require_tool("unshare", why="a private tmpfs: a full or read-only disk")
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    flags = ["--mount"] if os.geteuid() == 0 else ["--mount", "--map-root-user"]
    probe = subprocess.run(
        [unshare, *flags, "sh", "-c", f'mount -t tmpfs -o size=64k tmpfs "{mnt}"'],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        facts.missing("a private mount namespace (unshare --mount)", probe.stderr.strip())
    script = f'mount -t tmpfs -o {options} tmpfs "$0" && {{ {then}; }} && exec "$@"'
    return [unshare, *flags, "sh", "-c", script, str(mnt)]


def test_a_read_only_report_dir_is_refused_before_the_build(tmp_path: Path, cache: Path) -> None:
    if os.geteuid() != 0:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o555)
        res = run_breakout(target, cache)
        target.chmod(0o755)
        refused(res, target, "a report cannot be written there: Permission denied", cache)
        return
    # root writes through permission bits: a read-only file system, in its own namespace
    target = tmp_path / "mnt"
    res = run_breakout(target, cache, private_mount(tmp_path, "ro,size=64k"))
    refused(res, target, "a report cannot be written there: Read-only file system (EROFS)", cache)


def test_a_report_dir_with_no_room_is_refused_before_the_build(tmp_path: Path, cache: Path) -> None:
    target = tmp_path / "mnt"
    fill = 'head -c 1048576 /dev/zero > "$0/filler" 2>/dev/null || true'
    res = run_breakout(target, cache, private_mount(tmp_path, "size=64k", then=fill))
    refused(res, target, "a report cannot be written there: No space left on device", cache)


def python(code: str, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh Python (SIGXFSZ back to its default, as a child gets it), under a
    file size limit if given."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=None if limit is None else file_size_limit(limit),
    )


def test_sigxfsz_is_ignored_so_writes_fail_instead_of_killing(tmp_path: Path) -> None:
    """A write past RLIMIT_FSIZE fails with EFBIG (a note in the report): it does not kill
    the harness, as SIGXFSZ's default action would."""
    code = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"  # undo CPython's own SIG_IGN
        "from harness.cli import _install_signal_handlers\n"
        "from harness.files import atomic_write, write_failure\n"
        "_install_signal_handlers()\n"
        "try:\n"
        "    atomic_write(Path(sys.argv[1]) / 'big.txt', 'x' * 100)\n"
        "except OSError as exc:\n"
        "    print(write_failure(exc))\n"
    )
    out = python(code, str(tmp_path), limit=10)
    assert out.returncode == 0, out.stderr  # not -SIGXFSZ
    assert out.stdout.strip() == "File too large (EFBIG)"
    assert list(tmp_path.iterdir()) == []  # no half file


def test_an_internal_error_on_a_full_disk_is_still_one_line(tmp_path: Path) -> None:
    """The internal-error path itself on a full disk: its traceback file cannot be written
    (and is not left empty); the one line and the exit code come all the same."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from harness.cli import _install_signal_handlers, _internal_error\n"
        "_install_signal_handlers()\n"
        "try:\n"
        "    raise RuntimeError('a bug')\n"
        "except RuntimeError as exc:\n"
        "    sys.exit(_internal_error(exc, Path(sys.argv[1])))\n"
    )
    out = python(code, str(tmp_path / "reports"), limit=10)
    assert out.returncode == INTERNAL_ERROR
    assert out.stderr.splitlines() == [
        "harness: internal error: RuntimeError('a bug') (no traceback file: "
        f"{tmp_path / 'reports' / 'harness-internal-error.txt'}: [Errno 27] File too large)"
    ]
    assert list((tmp_path / "reports").iterdir()) == []  # no empty file, no temporary one
