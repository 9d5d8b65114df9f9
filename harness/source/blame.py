"""Which commit put the hang's line there: `git blame` of the line, and for a line inside an
OpenMP region, the commit that introduced its `#pragma omp` (blame of the pragma line, and
the pickaxe `git log -S'<pragma text>'`, which a reindent or a neighbour's edit does not fool).

Every git call goes through harness.source.gitrepo's `_read` (GitPython's
`Git.execute` with kill_after_timeout, git in its own session, killed and reaped on an
interruption): the same hard timeout as the other history reads (HISTORY_TIMEOUT_S, per
git call: rev-parse, ls-tree, cat-file, blame, blame, log -S). Not GitPython's
`Repo.blame`: a kill_after_timeout passed through it would bound git the same way, but
without the kill and reap `_read` does when the call is interrupted. Git
failures and timeouts are one-line HarnessErrors; a file not tracked at the revision or
a line out of range is a result with `reason` set and no commits.

What is read is the revision (default HEAD), not the working tree: the hang's line is a
line of the tree that was built, and a build of a verified pin is a clean commit.

The pickaxe rule: `git log --first-parent -S<text> -- <file>` lists the first-parent
commits that changed how often the pragma's text occurs in the file. Each patch's added
and removed lines with that text are placed in a function (git's hunk header, or a
definition the same hunk adds above them). Walking back from the revision with the
number of copies the located function holds there, the answer is the commit before which
the function held none: the oldest commit that added it on the first-parent line that
still has it. An identical pragma elsewhere in the file (the replica has one in
vec_thread_main) does not count; a reindent or a moved line does not change the count,
so it is not listed at all. When no patch places the text in the function, the newest
commit that adds it anywhere in the file is the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

from harness.source import gitrepo
from harness.source.gitrepo import HISTORY_TIMEOUT_S, CommitInfo
from harness.vocab import BlameHow

BLAME, LOG_S = BlameHow.BLAME, BlameHow.LOG_S
_OMP = re.compile(r"^\s*#\s*pragma\s+omp\b")
_DEFINITION = re.compile(r"^[A-Za-z_][\w\s\*,]*?\b([A-Za-z_]\w*)\s*\(")  # at column 0
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@ ?(.*)$")
_RECORD = "\x1e"


@dataclass(frozen=True)
class LineCommit:
    """The commit a line is owed to, and how it was found."""

    sha: str
    subject: str
    author: str  # "Name <email>"
    date: str  # author date, strict ISO 8601
    file: str  # relative to the checkout root
    line: int  # 1-based, in the file at the revision read
    how_found: BlameHow

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass(frozen=True)
class HangBlame:
    """Blame of a hang's line and of the OpenMP pragma above it (when there is one)."""

    file: str
    line: int
    rev: str  # the commit read
    commit: LineCommit | None  # last change of the line (blame); None: see reason
    function: str | None = None  # the function the pragma was looked for in
    pragma: str | None = None  # the pragma's text (stripped), when found
    pragma_line: int | None = None
    pragma_commit: LineCommit | None = None  # blame of the pragma's line
    pragma_introduced: LineCommit | None = None  # git log -S: the commit that added it there
    reason: str = ""  # why a commit is None ("" when nothing is missing), one line

    @property
    def where(self) -> str:
        """`file:line`, or the file alone ("" when neither is known)."""
        return f"{self.file}:{self.line}" if self.file and self.line else self.file

    @property
    def construct(self) -> LineCommit | None:
        """The commit that brought the construct over the line in: git log -S's (a reindent
        does not fool it), else the blame of the pragma's line."""
        return self.pragma_introduced or self.pragma_commit


def _commit(info: CommitInfo, file: str, line: int, how: BlameHow) -> LineCommit:
    return LineCommit(info.sha, info.subject, info.author, info.date, file, line, how)


def _relative(root: Path, file: str | Path) -> str | None:
    """The path relative to the root, as git names it; None when it leaves the root."""
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(root.resolve())
        except ValueError:
            return None
    parts = PurePosixPath(path.as_posix()).parts
    parts = tuple(p for p in parts if p != ".")
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _blob_lines(root: Path, sha: str, file: str, timeout: float) -> list[str] | None:
    """The file's lines at commit `sha`, or None when it is not a tracked file there."""
    out = gitrepo._read(root, "ls-tree", "-z", sha, "--", file, timeout=timeout)[1]
    entries = [e for e in out.split("\0") if e]
    blob = None
    for entry in entries:
        meta, _, name = entry.partition("\t")
        fields = meta.split()
        if name == file and len(fields) == 3 and fields[1] == "blob":
            blob = fields[2]
    if blob is None:
        return None
    text = gitrepo._read(root, "cat-file", "blob", blob, timeout=timeout)[1]
    lines = text.split("\n")  # git's lines: not str.splitlines, which also splits at \f, \x1c...
    return lines[:-1] if text.endswith("\n") else lines


def _porcelain(text: str, file: str, line: int) -> LineCommit:
    lines = text.splitlines()
    sha = lines[0].split()[0]
    head: dict[str, str] = {}
    for row in lines[1:]:
        if row.startswith("\t"):
            break
        key, _, value = row.partition(" ")
        head.setdefault(key, value)
    tz = head.get("author-tz", "+0000")
    sign = -1 if tz.startswith("-") else 1
    offset = timedelta(hours=int(tz[1:3] or 0), minutes=int(tz[3:5] or 0)) * sign
    when = datetime.fromtimestamp(int(head.get("author-time", "0")), timezone(offset))
    author = f"{head.get('author', '?')} {head.get('author-mail', '')}".strip()
    date = when.isoformat()
    return LineCommit(sha, head.get("summary", ""), author, date, file, line, BLAME)


def blame_line(
    root: Path, sha: str, file: str, line: int, *, timeout: float = HISTORY_TIMEOUT_S
) -> LineCommit:
    """The commit that last changed `line` of `file` at commit `sha` (both known to exist)."""
    args = ("blame", "--porcelain", "-L", f"{line},{line}", sha, "--", file)
    return _porcelain(gitrepo._read(root, *args, timeout=timeout)[1], file, line)


# ---------------------------------------------------------------- the pragma


def _function_start(lines: list[str], line: int, function: str | None) -> tuple[int, str | None]:
    """(0-based index, name) of the definition the 1-based `line` is in: the nearest line
    at or above it that opens `function` at column 0, else any definition; (0, None) if
    none. A GCC clone's suffix (`env_start._omp_fn.0`) is dropped from `function`."""
    wanted = [function.split(".")[0], None] if function else [None]
    for name in wanted:
        for i in range(min(line, len(lines)) - 1, -1, -1):
            m = _DEFINITION.match(lines[i])
            if m is None or lines[i].rstrip().endswith(";"):
                continue
            if name is None or m.group(1) == name:
                return i, m.group(1)
    return 0, None


def find_pragma(
    lines: list[str], line: int, function: str | None = None, pragma: str | None = None
) -> tuple[int, str] | None:
    """(1-based line, stripped text) of the `#pragma omp` nearest at or above `line`, not
    above the start of the function it is in; with `pragma`, the nearest line above that
    starts with that text (whitespace-normalised) instead."""
    want = " ".join(pragma.split()) if pragma else None
    start, _ = _function_start(lines, line, function) if want is None else (0, None)
    for i in range(min(line, len(lines)) - 1, start - 1, -1):
        text = " ".join(lines[i].split())
        if (want is not None and text.startswith(want)) or (want is None and _OMP.match(lines[i])):
            return i + 1, lines[i].strip()
    return None


def _log_s_changes(
    root: Path, sha: str, file: str, text: str, timeout: float
) -> list[tuple[CommitInfo, list[str], list[str]]]:
    """The first-parent pickaxe commits, newest first, each with the function contexts of
    the lines holding `text` that its patch adds, and of those it removes (the hunk
    header git gives, or a definition the same hunk adds or removes above the line)."""
    fmt = gitrepo._FORMAT.replace("--format=", "--format=%x1e")  # _RECORD before each commit
    args: tuple[str, ...] = ("log", "--first-parent", "--no-show-signature", "--no-color")
    args = (*args, "--no-ext-diff", "-p", "-U0", fmt, f"-S{text}", sha, "--", file)
    out = gitrepo._read(root, *args, timeout=timeout)[1]
    commits = []
    for record in out.split(_RECORD)[1:]:
        head, _, patch = record.partition("\n")
        info = CommitInfo(*head.split("\x1f", 3))
        changed: dict[str, list[str]] = {"+": [], "-": []}
        context = ""
        for row in patch.splitlines():
            m = _HUNK.match(row)
            if m is not None:
                context = m.group(2)
            elif row[:1] in changed and row[:3] not in ("+++", "---"):
                if _DEFINITION.match(row[1:]) and not row.rstrip().endswith(";"):
                    context = row[1:]
                if text in row:
                    changed[row[0]].append(context)
        commits.append((info, changed["+"], changed["-"]))
    return commits


def pragma_introduced(
    root: Path,
    sha: str,
    file: str,
    text: str,
    line: int,
    function: str | None,
    count: int = 1,
    *,
    timeout: float = HISTORY_TIMEOUT_S,
) -> tuple[LineCommit | None, str]:
    """The commit that introduced `text` (a pragma at `line` of `file`, `count` times in
    `function` at `sha`) on `sha`'s first-parent line, by the pickaxe: walking back, the
    commit before which `function` no longer held the text; (None, why) if none is."""
    commits = _log_s_changes(root, sha, file, text, timeout)
    in_function = re.compile(rf"\b{re.escape(function)}\s*\(") if function else None

    def here(contexts: list[str]) -> int:
        return sum(1 for c in contexts if in_function is None or in_function.search(c))

    held, last_add = count, None
    for info, adds, removes in commits:
        if here(adds):
            last_add = info
        held -= here(adds) - here(removes)
        if held <= 0 and here(adds):
            return _commit(info, file, line, LOG_S), ""
    if last_add is None:  # the function is in no hunk's context: any commit that adds it
        last_add = next((info for info, adds, _ in commits if adds), None)
    if last_add is not None:
        return _commit(last_add, file, line, LOG_S), ""
    return None, f"no first-parent commit adds {text!r} to {file}"


def _count_in_function(lines: list[str], start: int, text: str) -> int:
    """How often `text` occurs from the definition at index `start` to its closing brace
    at column 0 (the whole file when start is 0 and no definition was found)."""
    n = 0
    for i in range(start, len(lines)):
        n += lines[i].count(text)
        if i > start and lines[i].startswith("}"):
            break
    return max(n, 1)


# ---------------------------------------------------------------- the whole question


def blame_hang(
    root: Path,
    file: str | Path,
    line: int,
    *,
    function: str | None = None,
    pragma: str | None = None,
    rev: str = "HEAD",
    timeout: float = HISTORY_TIMEOUT_S,
) -> HangBlame:
    """Blame `line` of `file` (relative to the checkout `root`, or absolute inside it) at
    `rev`; if an OpenMP pragma is above it in its function (`function`, else the
    definition found above the line) or `pragma` text is given, the commits behind that
    pragma too. A bad revision, a git failure or a timeout raises HarnessError."""
    sha = gitrepo.resolve(root, rev, timeout=timeout)
    name = _relative(root, file)
    if name is None:
        return HangBlame(str(file), line, sha, None, reason=f"{file} is not inside {root}")
    lines = _blob_lines(root, sha, name, timeout)
    if lines is None:
        reason = f"{name} is not a tracked file at {sha[:12]}"
        return HangBlame(name, line, sha, None, reason=reason)
    if not 1 <= line <= len(lines):
        reason = f"line {line} is out of range: {name} has {len(lines)} lines at {sha[:12]}"
        return HangBlame(name, line, sha, None, reason=reason)
    commit = blame_line(root, sha, name, line, timeout=timeout)
    start, located = _function_start(lines, line, function)
    found = find_pragma(lines, line, function, pragma)
    if found is None:
        what = repr(pragma) if pragma else "#pragma omp"
        where = f" in {located}" if located else ""
        reason = f"no {what} above line {line}{where}"
        return HangBlame(name, line, sha, commit, located, reason=reason)
    at, text = found
    blamed = blame_line(root, sha, name, at, timeout=timeout)
    count = _count_in_function(lines, start, text) if located else sum(x.count(text) for x in lines)
    added, reason = pragma_introduced(root, sha, name, text, at, located, count, timeout=timeout)
    return HangBlame(name, line, sha, commit, located, text, at, blamed, added, reason)
