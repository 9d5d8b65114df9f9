"""harness.source: the dispatch on a pin's source kind, and the repository reads of
gitrepo checked against the git CLI on real repositories, including reads that really
block (a FIFO nobody writes) and must end at their timeout with nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from harness.config.pin import load_pin
from harness.errors import HarnessError, Interrupted
from harness.outcome import USAGE
from harness.source import Source, gitrepo, source_for, verify_source
from harness.source.git import GitSource
from harness.source.path import PathSource
from harness.source.pypi import PypiSource
from harness.source.verify import Verification
from tests.gitrepo import git, write_pin

UNICODE_AUTHOR = "Zoë Ünïcode <zoe@example.invalid>"


class Repo:
    """A small history with what first-parent walks and commit metadata must get right:
    a multi-line subject, a non-ASCII author in +05:30, a merged side branch, a tag."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.c: dict[str, str] = {}
        root.mkdir(parents=True)
        git(root, "init", "--quiet", "--initial-branch=main")
        git(root, "config", "commit.gpgsign", "false")
        (root / ".gitignore").write_text("ignored.txt\n")
        self.commit("c0", "base", "a.txt", "2026-01-01T00:00:00+00:00")
        self.commit(
            "c1", "first line\nsecond line\n\nthe body", "a.txt", "2026-01-02T10:00:00+00:00"
        )
        git(root, "checkout", "--quiet", "-b", "side")
        self.commit("s1", "side one", "side.txt", "2026-01-03T00:00:00+00:00")
        self.commit("s2", "side two", "side.txt", "2026-01-04T00:00:00+00:00")
        git(root, "checkout", "--quiet", "main")
        self.commit("c2", "unicode author", "b.txt", "2026-01-05T12:30:00+05:30", UNICODE_AUTHOR)
        git(root, "tag", "v1")
        git(
            root,
            "merge",
            "--quiet",
            "--no-ff",
            "-m",
            "merge side",
            "side",
            date="2026-01-06T00:00:00+00:00",
        )
        self.c["m"] = git(root, "rev-parse", "HEAD")
        self.commit("c3", "after the merge", "a.txt", "2026-01-07T00:00:00-07:00")

    def commit(self, name: str, message: str, path: str, date: str, author: str = "") -> None:
        (self.root / path).write_text(f"{name}\n")
        git(self.root, "add", "-A")
        extra = [f"--author={author}"] if author else []
        git(self.root, "commit", "--quiet", "--no-verify", *extra, "-m", message, date=date)
        self.c[name] = git(self.root, "rev-parse", "HEAD")

    def cli(self, *args: str) -> str:
        """git's own output, unstripped but for the final newline."""
        res = subprocess.run(
            ["git", "-C", str(self.root), *args], capture_output=True, text=True, check=True
        )
        return res.stdout.removesuffix("\n")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return Repo(tmp_path_factory.mktemp("source") / "repo")


def one_line_usage(info: pytest.ExceptionInfo[HarnessError], *words: str) -> None:
    err = info.value
    assert err.exit_code == USAGE and "\n" not in err.message, err.message
    for word in words:
        assert word in err.message, err.message


# ---------------------------------------------------------------- reads against the CLI


def test_resolve_matches_rev_parse(repo: Repo) -> None:
    for rev in ("HEAD", "HEAD~1", "HEAD~1^2", "main", "side", "v1", repo.c["c1"][:9], "HEAD~1^2~1"):
        assert gitrepo.resolve(repo.root, rev) == repo.cli("rev-parse", f"{rev}^{{commit}}")
    assert gitrepo.head_commit(repo.root) == repo.cli("rev-parse", "HEAD") == repo.c["c3"]
    assert gitrepo.toplevel(repo.root) == Path(repo.cli("rev-parse", "--show-toplevel"))


def test_first_parent_range_matches_rev_list(repo: Repo) -> None:
    for good, bad in (("c0", "c3"), ("c1", "m"), ("s1", "c3"), ("c2", "c2")):
        got = gitrepo.first_parent_range(repo.root, repo.c[good], repo.c[bad])
        want = repo.cli("rev-list", "--first-parent", "--reverse", f"{repo.c[good]}..{repo.c[bad]}")
        assert [c.sha for c in got] == want.split()
        for info in got:
            assert info == gitrepo.commit_info(repo.root, info.sha)
    shas = [c.sha for c in gitrepo.first_parent_range(repo.root, repo.c["c0"], repo.c["c3"])]
    assert shas == [repo.c[n] for n in ("c1", "c2", "m", "c3")]  # the side branch is one step


def test_commit_info_matches_git_show(repo: Repo) -> None:
    for name, sha in repo.c.items():
        info = gitrepo.commit_info(repo.root, sha)
        show = [
            repo.cli("show", "-s", f"--format={f}", sha) for f in ("%H", "%s", "%an <%ae>", "%aI")
        ]
        assert [info.sha, info.subject, info.author, info.date] == show, name
        assert info.short == sha[:12]
    c1, c2 = (
        gitrepo.commit_info(repo.root, repo.c["c1"]),
        gitrepo.commit_info(repo.root, repo.c["c2"]),
    )
    assert c1.subject == "first line second line"  # git's %s: the first paragraph, joined
    assert (c2.author, c2.date) == (UNICODE_AUTHOR, "2026-01-05T12:30:00+05:30")


def test_ancestry_matches_merge_base(repo: Repo) -> None:
    for older in repo.c:
        for newer in repo.c:
            a, b = repo.c[older], repo.c[newer]
            truth = subprocess.run(
                ["git", "-C", str(repo.root), "merge-base", "--is-ancestor", a, b], check=False
            ).returncode
            assert gitrepo.is_ancestor(repo.root, a, b) is (truth == 0), (older, newer)


def test_diffstat_is_against_the_first_parent(repo: Repo) -> None:
    assert gitrepo.diffstat(repo.root, repo.c["m"]) == repo.cli(
        "diff", "--stat", f"{repo.c['m']}^1", repo.c["m"]
    )
    assert "side.txt" in gitrepo.diffstat(repo.root, repo.c["m"])


def test_dirty_paths_match_status(tmp_path: Path) -> None:
    r = Repo(tmp_path / "repo")
    assert gitrepo.dirty_paths(r.root) == []
    (r.root / "a.txt").write_text("changed\n")
    (r.root / "side.txt").unlink()
    (r.root / "staged.txt").write_text("new\n")
    git(r.root, "add", "staged.txt")
    (r.root / "newdir").mkdir()
    (r.root / "newdir" / "x.txt").write_text("untracked\n")
    (r.root / "ignored.txt").write_text("ignored\n")
    porcelain = r.cli("status", "--porcelain", "--untracked-files=normal")
    got = gitrepo.dirty_paths(r.root)
    assert got == [line[3:] for line in porcelain.splitlines() if line.strip()]
    assert sorted(got) == ["a.txt", "newdir/", "side.txt", "staged.txt"]


# ---------------------------------------------------------------- one-line errors


def test_bad_revisions_are_one_line_errors(repo: Repo) -> None:
    with pytest.raises(HarnessError) as info:
        gitrepo.resolve(repo.root, "no-such-rev")
    one_line_usage(info, "unknown revision 'no-such-rev'")
    with pytest.raises(HarnessError) as info:
        gitrepo.resolve(repo.root, "--all")
    one_line_usage(info, "not a revision")
    with pytest.raises(HarnessError) as info:
        gitrepo.commit_info(repo.root, "0" * 40)
    one_line_usage(info, "git log -1 failed in", str(repo.root))
    with pytest.raises(HarnessError) as info:
        gitrepo.first_parent_range(repo.root, "nope", repo.c["c3"])
    one_line_usage(info, "git log --first-parent failed")
    with pytest.raises(HarnessError) as info:
        gitrepo.is_ancestor(repo.root, "nope", repo.c["c3"])
    one_line_usage(info, "git merge-base --is-ancestor failed")


READS: dict[str, Callable[[Path], object]] = {
    "resolve": lambda p: gitrepo.resolve(p, "HEAD"),
    "is_ancestor": lambda p: gitrepo.is_ancestor(p, "HEAD", "HEAD"),
    "commit_info": lambda p: gitrepo.commit_info(p, "HEAD"),
    "first_parent_range": lambda p: gitrepo.first_parent_range(p, "HEAD~1", "HEAD"),
    "diffstat": lambda p: gitrepo.diffstat(p, "HEAD"),
    "toplevel": gitrepo.toplevel,
    "head_commit": gitrepo.head_commit,
    "dirty_paths": gitrepo.dirty_paths,
}


@pytest.mark.parametrize("read", sorted(READS))
def test_not_a_repository(read: str, tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        READS[read](tmp_path)
    one_line_usage(info, f"checkout {tmp_path} is not a git repository")
    with pytest.raises(HarnessError) as info:
        READS[read](tmp_path / "missing")
    one_line_usage(info, "does not exist")


# ---------------------------------------------------------------- reads that really block


def _snapshot() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def assert_nothing_left(marker: Path, before: set[int]) -> None:
    """No process of ours (zombies included) appeared, and none anywhere (re-parented
    orphans included) mentions `marker` in its command line."""
    deadline = time.monotonic() + 3
    while True:
        ours = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        stray = []
        for p in psutil.process_iter(["cmdline"]):
            if p.pid != os.getpid() and str(marker) in " ".join(p.info["cmdline"] or []):
                stray.append(p)
        if not ours and not stray:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"left behind: {ours + stray}")
        time.sleep(0.05)


def fifo_object_repo(root: Path) -> str:
    """A repository whose HEAD commit object is a FIFO: git blocks opening it, for real."""
    r = Repo(root)
    sha = r.c["c3"]
    obj = root / ".git" / "objects" / sha[:2] / sha[2:]
    obj.unlink()
    os.mkfifo(obj)
    return sha


def fsmonitor_repo(root: Path) -> Path:
    """A repository whose core.fsmonitor hook blocks reading a FIFO nobody writes, so that
    `git status` blocks for real. Returns the file the hook touches when it starts."""
    Repo(root)
    fifo, started = root.parent / "fsmonitor.fifo", root.parent / "hook-started"
    os.mkfifo(fifo)
    hook = root.parent / "fsmonitor-hook.sh"
    hook.write_text(f'#!/bin/sh\ntouch "{started}"\ncat "{fifo}"\n')
    hook.chmod(0o755)
    git(root, "config", "core.fsmonitor", str(hook))
    return started


@pytest.mark.timeout(60)
def test_status_read_times_out_and_kills_the_hook(tmp_path: Path) -> None:
    started = fsmonitor_repo(tmp_path / "repo")
    before = _snapshot()
    t0 = time.monotonic()
    with pytest.raises(HarnessError) as info:
        gitrepo.dirty_paths(tmp_path / "repo", timeout=2)
    elapsed = time.monotonic() - t0
    one_line_usage(info, "git status timed out after 2s")
    assert started.exists(), "the fsmonitor hook never ran: nothing really blocked"
    assert 2 <= elapsed < 10
    assert_nothing_left(tmp_path, before)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read", ["commit_info", "resolve", "is_ancestor"])
def test_object_read_times_out(read: str, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    sha = fifo_object_repo(root)
    calls: dict[str, Callable[[], object]] = {
        "commit_info": lambda: gitrepo.commit_info(root, sha, timeout=2),
        "resolve": lambda: gitrepo.resolve(root, sha, timeout=2),
        "is_ancestor": lambda: gitrepo.is_ancestor(root, sha, sha, timeout=2),
    }
    command = {"commit_info": "log", "resolve": "rev-parse", "is_ancestor": "merge-base"}[read]
    before = _snapshot()
    t0 = time.monotonic()
    with pytest.raises(HarnessError) as info:
        calls[read]()
    one_line_usage(info, f"git {command} timed out after 2s in {root}")
    assert 2 <= time.monotonic() - t0 < 10
    assert_nothing_left(tmp_path, before)


@pytest.fixture
def interrupt_after() -> Iterator[Callable[[float], None]]:
    """Raise Interrupted in the main thread after a delay, as the harness's handlers do."""

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    old = signal.signal(signal.SIGUSR1, handler)
    timers: list[threading.Timer] = []

    def arm(delay: float) -> None:
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGUSR1))
        timers.append(timer)
        timer.start()

    yield arm
    for timer in timers:
        timer.cancel()
    signal.signal(signal.SIGUSR1, old)


@pytest.mark.timeout(60)
def test_interrupted_read_kills_git_at_once(
    tmp_path: Path, interrupt_after: Callable[[float], None]
) -> None:
    """GitPython leaves git running when its call is interrupted, and its watchdog pending
    until the deadline: gitrepo kills and reaps git at once and cancels the watchdog."""
    root = tmp_path / "repo"
    sha = fifo_object_repo(root)
    before = _snapshot()
    interrupt_after(1.0)
    t0 = time.monotonic()
    with pytest.raises(Interrupted):
        gitrepo.commit_info(root, sha, timeout=30)
    assert time.monotonic() - t0 < 10
    assert_nothing_left(tmp_path, before)
    pending = [
        t
        for t in threading.enumerate()
        if isinstance(t, threading.Timer) and getattr(t.function, "__module__", "") == "git.cmd"
    ]
    for t in pending:
        t.join(timeout=2)
    assert not any(t.is_alive() for t in pending), "GitPython's watchdog is still pending"


# ---------------------------------------------------------------- the dispatch


def test_path_source(tmp_path: Path) -> None:
    pin = load_pin("replica")
    source = source_for(pin)
    assert isinstance(source, PathSource) and source.kind == "path"
    v, root = source.verify()
    assert isinstance(v, Verification) and root == pin.source_root
    assert verify_source(pin)[1] == root
    assert source.export(root, tmp_path / "tree") == []
    assert (tmp_path / "tree" / "build.sh").is_file()
    assert not any((tmp_path / "tree" / out).exists() for out in pin.build_outputs)
    generic: Source = source  # a path source has no refs: the protocol's None
    assert generic.ref_applier(root) is None
    with pytest.raises(HarnessError):
        source.export(root, tmp_path / "other", commit="HEAD")


def test_git_source(tmp_path: Path) -> None:
    r = Repo(tmp_path / "repo")
    (r.root / "untracked.txt").write_text("kept\n")
    (r.root / "ignored.txt").write_text("left out\n")
    write_pin(tmp_path / "pin.toml", r.root, r.c["c3"])
    pin = load_pin(str(tmp_path / "pin.toml"))
    source = source_for(pin)
    assert isinstance(source, GitSource) and source.kind == "git"
    v, root = source.verify(r.root)
    assert root == r.root.resolve() and v.commit_actual == r.c["c3"]
    assert v.dirty == ["untracked.txt"] and v.status == "drift"
    assert source.export(root, tmp_path / "work") == []
    assert (tmp_path / "work" / "untracked.txt").is_file()
    assert not (tmp_path / "work" / "ignored.txt").exists()
    assert source.export(root, tmp_path / "c0", commit=r.c["c0"]) == []
    assert sorted(p.name for p in (tmp_path / "c0").iterdir()) == [".gitignore", "a.txt"]
    assert callable(source.ref_applier(root))


def test_pypi_source() -> None:
    source = source_for(load_pin("pufferlib-3.0.0"))
    assert isinstance(source, PypiSource) and source.kind == "pypi"
    generic: Source = source
    assert generic.ref_applier(Path("unused")) is None
