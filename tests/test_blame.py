"""harness.source.blame on a generated git history of the replica (tests/gitrepo.py):
"compact everything" puts `#pragma omp parallel for` back into env_start; later commits
touch the lines around it, add the same pragma elsewhere, or reindent it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.source.blame import BLAME, LOG_S, blame_hang, find_pragma
from tests.gitrepo import (
    ENV_START,
    PRAGMA,
    RESET_LOOP,
    SUBJECTS,
    History,
    git,
    make_history,
    plan_with,
)

VECENV = "src/vecenv.h"
VEC_CREATE = (
    "static void vec_create(VecEnv* vec, const Env* proto, int num_envs, int num_buffers,\n"
)
HANG = SUBJECTS["hang"]  # "compact everything"
TIDY = "tidy: pre-increment in env_start"
ELSEWHERE = "warm-up: parallel env_warm"
FOR_LINE = "    for (int i = 0; i < vec->num_envs; i++) {\n"
WARM = (
    "static void env_warm(VecEnv* vec) {\n"
    + PRAGMA
    + FOR_LINE
    + "        env_reset(&vec->envs[i]);\n    }\n}\n\n"
)


def commit(h: History, subject: str, n: int) -> None:
    git(h.root, "add", "-A")
    git(
        h.root,
        "commit",
        "--quiet",
        "--no-verify",
        "-m",
        subject,
        date=f"2026-01-02T00:00:{n:02d}+00:00",
    )
    h.commits.append(git(h.root, "rev-parse", "HEAD"))
    h.subjects.append(subject)


def edit(h: History, old: str, new: str) -> None:
    path = h.root / VECENV
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def line_of(h: History, text: str, after: str = ENV_START) -> int:
    """1-based line of the first line starting with `text` after the line `after`."""
    lines = (h.root / VECENV).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line == after)
    return next(i for i in range(start, len(lines)) if lines[i].startswith(text)) + 1


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """base, churn 1-2, "compact everything", churn 4-6 (the env_start revision comment
    above it, a renamed local, a re-spaced buffer), then a commit that edits the loop line
    right under the pragma, then one that adds the same pragma text in a new function."""
    h = make_history(tmp_path_factory.mktemp("blame"), plan_with(6, {3: "hang"}))
    edit(h, RESET_LOOP, RESET_LOOP.replace("i++", "++i"))
    commit(h, TIDY, 1)
    edit(h, "static void env_start(", WARM + "static void env_start(")
    commit(h, ELSEWHERE, 2)
    return h


def test_blame_of_the_pragma_line_and_log_s_name_compact_everything(history: History) -> None:
    hang_line = line_of(history, "        env_reset(")
    b = blame_hang(history.root, VECENV, hang_line, function="env_start")
    print(b)

    assert b.reason == "" and b.rev == history.commits[-1]
    assert b.function == "env_start"
    assert b.pragma == PRAGMA.strip() and b.pragma_line == hang_line - 2
    assert b.pragma_commit is not None and b.pragma_introduced is not None
    assert (b.pragma_commit.subject, b.pragma_commit.how_found) == (HANG, BLAME)
    assert (b.pragma_introduced.subject, b.pragma_introduced.how_found) == (HANG, LOG_S)
    assert b.pragma_commit.sha == b.pragma_introduced.sha == history.sha(HANG)
    assert b.pragma_introduced.line == b.pragma_line and b.pragma_introduced.file == VECENV
    assert b.pragma_commit.author == "Bisect Test <bisect@example.invalid>"
    assert b.pragma_commit.date == "2026-01-01T00:00:03+00:00"
    # the hang line itself was last changed long before: the base
    assert b.commit is not None and b.commit.subject == "base: serial env reset"


def test_an_edit_of_the_neighbouring_line_does_not_fool_it(history: History) -> None:
    loop_line = line_of(history, "    for (int i = 0; i < vec->num_envs; ++i)")
    b = blame_hang(history.root, VECENV, loop_line)  # function found from the definition

    assert b.commit is not None and b.commit.subject == TIDY  # the line itself: the tidy-up
    assert b.function == "env_start"
    assert b.pragma_commit is not None and b.pragma_commit.subject == HANG
    assert b.pragma_introduced is not None and b.pragma_introduced.subject == HANG


def test_the_same_pragma_added_in_another_function_does_not_fool_log_s(history: History) -> None:
    in_start = blame_hang(
        history.root, VECENV, line_of(history, "        env_reset("), function="env_start._omp_fn.0"
    )
    warm_line = line_of(
        history, "        env_reset(", after="static void env_warm(VecEnv* vec) {\n"
    )
    in_warm = blame_hang(history.root, VECENV, warm_line)

    assert in_start.function == "env_start"
    assert in_start.pragma_introduced is not None and in_start.pragma_introduced.subject == HANG
    assert in_warm.function == "env_warm"
    assert in_warm.pragma_commit is not None and in_warm.pragma_commit.subject == ELSEWHERE
    assert in_warm.pragma_introduced is not None and in_warm.pragma_introduced.subject == ELSEWHERE


def test_given_pragma_text_and_an_older_revision(history: History) -> None:
    at_hang = history.sha(HANG)
    lines = git(history.root, "show", f"{at_hang}:{VECENV}").splitlines()
    hang_line = next(i for i, line in enumerate(lines) if "env_reset(&vec->envs[i])" in line) + 1
    b = blame_hang(history.root, VECENV, hang_line, pragma="#pragma  omp parallel", rev=at_hang)

    assert b.rev == at_hang and b.pragma_line == hang_line - 2
    assert b.pragma_commit is not None and b.pragma_commit.sha == at_hang
    assert b.pragma_introduced is not None and b.pragma_introduced.sha == at_hang


def test_reindenting_the_pragma_fools_blame_but_not_log_s(tmp_path: Path) -> None:
    h = make_history(tmp_path, plan_with(4, {2: "hang"}))
    edit(h, ENV_START + PRAGMA, ENV_START + "  " + PRAGMA)
    commit(h, "style: indent pragmas", 1)
    b = blame_hang(h.root, VECENV, line_of(h, "        env_reset("))

    assert b.pragma_commit is not None and b.pragma_commit.subject == "style: indent pragmas"
    assert b.pragma_introduced is not None and b.pragma_introduced.subject == HANG


def test_no_pragma_above_the_line(history: History) -> None:
    line = line_of(
        history,
        "    vec->num_envs = num_envs;",
        after=VEC_CREATE,
    )
    b = blame_hang(history.root, VECENV, line)
    assert b.commit is not None and b.function == "vec_create"
    assert b.pragma is None and b.pragma_commit is None and b.pragma_introduced is None
    assert b.reason == f"no #pragma omp above line {line} in vec_create"


# ----------------------------------------------------------------------------- no answer


@pytest.mark.parametrize(
    ("file", "line", "why"),
    [
        ("src/missing.h", 3, "src/missing.h is not a tracked file at "),
        ("src", 1, "src is not a tracked file at "),
        (VECENV, 100_000, "line 100000 is out of range: src/vecenv.h has "),
        (VECENV, 0, "line 0 is out of range"),
        ("../outside.h", 1, "../outside.h is not inside "),
    ],
)
def test_missing_file_or_line_gives_none_with_a_reason(
    history: History, file: str, line: int, why: str
) -> None:
    b = blame_hang(history.root, file, line)
    assert b.commit is None and b.pragma_commit is None and b.pragma_introduced is None
    assert b.reason.startswith(why), b.reason
    assert "\n" not in b.reason


def test_untracked_file_and_absolute_path(history: History) -> None:
    scratch = history.root / "src" / "scratch.h"
    scratch.write_text("int x;\n")
    try:
        b = blame_hang(history.root, scratch, 1)
        assert b.commit is None and b.reason.startswith("src/scratch.h is not a tracked file")
    finally:
        scratch.unlink()
    b = blame_hang(history.root, history.root / VECENV, 1)
    assert b.commit is not None and b.file == VECENV


def test_git_errors_are_one_line_harness_errors(history: History, tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="unknown revision 'nope'") as bad:
        blame_hang(history.root, VECENV, 1, rev="nope")
    assert "\n" not in bad.value.message
    with pytest.raises(HarnessError, match="not a git repository"):
        blame_hang(tmp_path, VECENV, 1)


def test_find_pragma_stops_at_the_function() -> None:
    lines = [
        "static void a(void) {",
        "    #pragma omp parallel for",
        "    for (;;) {}",
        "}",
        "static void b(void) {",
        "    int x = 0;",
        "}",
    ]
    assert find_pragma(lines, 3) == (2, "#pragma omp parallel for")
    assert find_pragma(lines, 6) is None
    assert find_pragma(lines, 6, pragma="#pragma   omp parallel") == (2, "#pragma omp parallel for")


def test_a_second_copy_in_the_same_function(tmp_path: Path) -> None:
    """log -S answers for the function's pragma text: when the function first got it (on
    the line that still has it); blame tells the copies apart."""
    h = make_history(tmp_path, plan_with(3, {1: "hang"}))
    second = PRAGMA + FOR_LINE + "        (void)i;\n    }\n"
    buffers = "    for (int b = 0; b < vec->num_buffers; b++) {\n"
    edit(h, buffers, second + buffers)
    commit(h, "second parallel loop", 1)
    first = blame_hang(h.root, VECENV, line_of(h, "        env_reset("))
    other = blame_hang(h.root, VECENV, line_of(h, "        (void)i;"))

    assert first.pragma_commit is not None and first.pragma_commit.subject == HANG
    assert first.pragma_introduced is not None and first.pragma_introduced.subject == HANG
    assert other.pragma_line is not None and first.pragma_line is not None
    assert other.pragma_line > first.pragma_line
    assert other.pragma_commit is not None and other.pragma_commit.subject == "second parallel loop"
    assert other.pragma_introduced is not None and other.pragma_introduced.subject == HANG
