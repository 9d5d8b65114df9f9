"""Repository reads: revisions, first-parent history, ancestry, commit metadata, status.

Every read has a hard timeout, like every other external call of the harness; a timeout,
a missing repository, a bad revision or a failed git command is one HarnessError line.

Where each read runs:

- in-process (GitPython, no subprocess): `open_repo` (git.Repo reads .git and its config
  files; no object is read, so GitPython's `git cat-file` helper never starts) and
  `commit_matches`.
- git spawned by GitPython (`Git.execute`) with `kill_after_timeout`, in its own session:
  `resolve` (rev-parse --verify), `head_commit` (rev-parse HEAD), `toplevel` (rev-parse
  --show-toplevel), `is_ancestor` (merge-base --is-ancestor: exit 1 is "no"),
  `commit_info` and `first_parent_range` (`git log --format`: one process for a whole
  range), `diffstat` (diff --stat). None of them runs a hook, a pager or gpg
  (--no-show-signature), so git is the only process. Timeouts: HISTORY_TIMEOUT_S (60 s,
  what bisect has always used) for the history reads, GIT_TIMEOUT_S (120 s) for HEAD.
- git spawned through harness.process.tools.run_tool (own session, the whole session
  killed and reaped): `dirty_paths` (status --porcelain, GIT_TIMEOUT_S) and `git_result`,
  which source.git uses for the git calls it makes (fetch, archive, merge-base, ...).
  `git status` runs programs the repository configures (the core.fsmonitor hook, the
  status of submodules): see below.

Object reads are not done in-process: GitPython 3.2 deprecates its pure-Python GitDB
backend ("security and performance issues", a DeprecationWarning on every Repo), and the
default GitCmdObjectDB reads objects through a persistent `git cat-file --batch` process
whose reads have no timeout at all. Commit metadata therefore comes from `git log`.

What GitPython's kill_after_timeout does (git/cmd.py, 3.2.1): a threading.Timer that at
the deadline lists the git process's descendants (`pgrep -P`, recursively) and SIGKILLs
each; the call then returns exit status -9 with stderr "Timeout: the command ... did not
complete in N secs." (a GitCommandError when exceptions are on). Against a blocking
fsmonitor hook it does kill git, the hook and the hook's child. Its limits: a process
spawned after that listing, or that left the tree, survives; killed grandchildren are
never reaped (zombies under a subreaper, which the harness becomes once it has run a
trainer); and when the call is interrupted (the harness's Interrupted, KeyboardInterrupt)
git is left running and the Timer stays pending, a non-daemon thread that holds the
interpreter's exit until the deadline. Hence: `_read` kills and reaps git's session at
once on any interruption (and cancels the Timer), and `git status`, the one read that
runs the repository's programs, goes through run_tool.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from harness.config.pin import UNVERIFIED
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.process import tools
from harness.process.proctree import kill_tree

if TYPE_CHECKING:
    import git

GIT_TIMEOUT_S = 120.0
HISTORY_TIMEOUT_S = 60.0  # bisect's reads: rev-parse, merge-base, log, diff --stat

_TIMEOUT_STDERR = "Timeout: the command"  # what GitPython puts in stderr on a timeout


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str
    date: str

    @property
    def short(self) -> str:
        return self.sha[:12]


def open_repo(path: Path) -> git.Repo:
    # GitPython is imported by the first repository read: 0.1 s off every start of the
    # harness (most runs read no repository)
    import git

    if not path.exists():
        raise HarnessError(f"checkout {path} does not exist", USAGE)
    try:
        return git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise HarnessError(f"checkout {path} is not a git repository", USAGE) from exc


def commit_matches(expected: str, actual: str) -> bool:
    """An UNVERIFIED:<short> pin matches a commit with that prefix; a full pin matches exactly."""
    if expected.startswith(UNVERIFIED):
        short = expected.split(":", 1)[-1]
        return bool(short) and actual.startswith(short)
    return actual == expected


# ---------------------------------------------------------------- running git


def git_result(
    root: Path, *args: str, timeout: float = GIT_TIMEOUT_S, ok: tuple[int, ...] = (0,)
) -> tools.ToolResult:
    """git through run_tool, with a hard timeout (its session is killed); exit codes
    outside `ok` are errors."""
    res = tools.run_tool(["git", "-C", str(root), *args], timeout=timeout)
    if res.timed_out:
        raise HarnessError(f"git {args[0]} timed out after {timeout:g}s in {root}", USAGE)
    if res.returncode not in ok:
        first = (res.error or res.stderr or res.stdout).strip().splitlines()
        raise HarnessError(
            f"git {' '.join(args[:2])} failed in {root}: {first[0] if first else res.returncode}",
            USAGE,
        )
    return res


def _read(
    root: Path, *args: str, timeout: float = GIT_TIMEOUT_S, ok: tuple[int, ...] = (0,)
) -> tuple[int, str]:
    """(exit status, stdout) of a git read spawned by GitPython with kill_after_timeout;
    the same errors, word for word, as git_result."""
    import git  # by the first read (open_repo)

    with open_repo(root) as repo:
        argv = [str(repo.git.GIT_PYTHON_GIT_EXECUTABLE or "git"), "-C", str(root), *args]
        before = set(threading.enumerate())
        start = time.monotonic()
        try:
            status, out, err = repo.git.execute(
                argv,
                kill_after_timeout=timeout,
                with_extended_output=True,
                with_exceptions=False,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
                start_new_session=True,  # passed to Popen: like run_tool, its own session
            )
        except (git.GitCommandNotFound, OSError) as exc:  # git missing or not runnable
            raise HarnessError(f"git {' '.join(args[:2])} failed in {root}: {exc}", USAGE) from exc
        except BaseException:
            _kill_pending(before)
            raise
    stderr = str(err).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if status < 0 and (stderr.startswith(_TIMEOUT_STDERR) or time.monotonic() - start >= timeout):
        raise HarnessError(f"git {args[0]} timed out after {timeout:g}s in {root}", USAGE)
    stdout = bytes(out).decode("utf-8", "replace")  # as run_tool decodes
    if status not in ok:
        first = (stderr or stdout).strip().splitlines()
        raise HarnessError(
            f"git {' '.join(args[:2])} failed in {root}: {first[0] if first else status}", USAGE
        )
    return int(status), stdout


def _kill_pending(before: set[threading.Thread]) -> None:
    """The call was interrupted: GitPython left git running and its watchdog Timer pending.
    Kill and reap git's tree now and cancel the Timer (it would hold the harness's exit
    until the deadline). The Timer's argument is git's pid, a session leader."""
    for timer in threading.enumerate():
        if timer in before or not isinstance(timer, threading.Timer):
            continue
        if getattr(timer.function, "__module__", "") != "git.cmd" or not timer.args:
            continue
        timer.cancel()
        pid = int(next(iter(timer.args)))
        with contextlib.suppress(psutil.Error):  # kill_tree also reaps git itself
            kill_tree(None, pid, extra=[psutil.Process(pid)])


# ---------------------------------------------------------------- reads


def head_commit(root: Path, *, timeout: float = GIT_TIMEOUT_S) -> str:
    return _read(root, "rev-parse", "HEAD", timeout=timeout)[1].strip()


def dirty_paths(root: Path, *, timeout: float = GIT_TIMEOUT_S) -> list[str]:
    # run_tool, not GitPython: status runs the repository's fsmonitor hook (and submodule
    # statuses); run_tool kills and reaps that whole session, GitPython only what it lists
    open_repo(root)
    out = git_result(root, "status", "--porcelain", "--untracked-files=normal", timeout=timeout)
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


def resolve(root: Path, rev: str, *, timeout: float = HISTORY_TIMEOUT_S) -> str:
    """The full hash of the commit `rev` names, or a usage error."""
    if not rev or rev.startswith("-"):
        raise HarnessError(f"not a revision: {rev!r}", USAGE)
    args = ("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    status, out = _read(root, *args, timeout=timeout, ok=(0, 1, 128))
    if status != 0:
        raise HarnessError(f"unknown revision {rev!r} in {root}", USAGE)
    return out.strip()


def is_ancestor(root: Path, older: str, newer: str, *, timeout: float = HISTORY_TIMEOUT_S) -> bool:
    args = ("merge-base", "--is-ancestor", older, newer)
    return _read(root, *args, timeout=timeout, ok=(0, 1))[0] == 0


_FORMAT = "--format=%H%x1f%s%x1f%an <%ae>%x1f%aI"


def _parse_log(text: str) -> list[CommitInfo]:
    return [CommitInfo(*line.split("\x1f", 3)) for line in text.splitlines() if line]


def commit_info(root: Path, sha: str, *, timeout: float = HISTORY_TIMEOUT_S) -> CommitInfo:
    args = ("log", "-1", "--no-show-signature", _FORMAT, sha)
    return _parse_log(_read(root, *args, timeout=timeout)[1])[0]


def first_parent_range(
    root: Path, good: str, bad: str, *, timeout: float = HISTORY_TIMEOUT_S
) -> list[CommitInfo]:
    """good..bad along bad's first parents, oldest first (merged branches count as one)."""
    args = ("log", "--first-parent", "--reverse", "--no-show-signature", _FORMAT)
    return _parse_log(_read(root, *args, f"{good}..{bad}", timeout=timeout)[1])


def diffstat(root: Path, sha: str, *, timeout: float = HISTORY_TIMEOUT_S) -> str:
    # against the first parent: a merge's stat is what it brought into the line
    return _read(root, "diff", "--stat", f"{sha}^1", sha, timeout=timeout)[1].rstrip()


def toplevel(path: Path, *, timeout: float = HISTORY_TIMEOUT_S) -> Path:
    return Path(_read(path, "rev-parse", "--show-toplevel", timeout=timeout)[1].strip())
