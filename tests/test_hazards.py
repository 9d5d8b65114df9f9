"""`--hazards` (issue 30, docs/hazards.md): hazards recorded in runs that pass, by the real
shim and hook in real processes: a lock-order inversion whose two orders never overlapped,
a fork after an OpenMP team whose child entered LLVM's libomp (which survives it), a Python
fork from a thread pool's process; and none in their look-alikes (one lock order, a child
that runs no region, a fork before any thread). Then the harness around them: report.json,
report.md and the summary line on a pass, `--expect hazard:…` as the failure (verdict
hazard, exit 9), bad input as one line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import outcome
from harness.analysis.classify import Verdict
from harness.bisect.steps import classify_run
from harness.cli import main as cli_main
from harness.errors import HarnessError
from harness.hazards.expect import parse_expect
from harness.hazards.findings import find_hazards
from harness.hazards.model import Hazard, HazardReport, Site, ThreadAtFork
from harness.hazards.records import read_records
from harness.hazards.shim import Recorders, hazard_env, recorders
from harness.outcome import USAGE, Kind
from harness.report import github
from harness.report.html import render_html
from harness.report.load import report_from_json
from harness.report.markdown import render_report
from harness.report.model import Report
from harness.vocab import BisectClass, HazardKind, RunMode
from tests.facts import require_tool
from tests.harness_cli import harness, verdict_of

PROGRAMS = Path(__file__).resolve().parent / "programs"
RUN_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def shim(cache_env: dict[str, str]) -> Recorders:
    """The recorders, built once per session into the session's shared cache."""
    return recorders(Path(cache_env["HARNESS_CACHE_DIR"]))


def recorded(rec: Recorders, folder: Path, *argv: str) -> HazardReport:
    """Run `argv` to its end with both recorders loaded; the hazards its records show."""
    folder.mkdir()
    env = {**os.environ, **hazard_env(rec, folder, os.environ)}
    done = subprocess.run(argv, env=env, capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return find_hazards(folder)


# LLVM's libomp re-initializes after fork, so a child that enters it passes. Twice in about
# ten runs of the whole suite beside two busy loops, such a child still hung, every thread
# in libomp's condition waits; never in 600 runs of the program without the suite's load,
# with the shim or without, nor in 80 runs of the clang replica: the cause is not known
# (docs/hazards.md, "Known issues"). The tests of libomp's fork then read the records the
# hung run left: the hazard is recorded at the fork and the child's entry, before it hangs
LIBOMP_CHILD_S = 20.0


def recorded_libomp(rec: Recorders, folder: Path, *argv: str) -> HazardReport:
    """`recorded`, for a program whose child enters libomp after a fork: a rare hang of
    that child is killed after LIBOMP_CHILD_S and its records are read all the same."""
    folder.mkdir()
    env = {**os.environ, **hazard_env(rec, folder, os.environ)}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=LIBOMP_CHILD_S)
        assert proc.returncode == 0, err.decode()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    return find_hazards(folder)


def line_of(program: str, text: str, after: str = "") -> int:
    """The line of `program` holding `text`, the first after the line holding `after` (the
    tests name lines by their code, not by number)."""
    lines = (PROGRAMS / program).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines[start:], start + 1) if text in line)


def test_a_lock_order_inversion_in_a_passing_run_and_none_in_one_order(
    shim: Recorders, c_program: Callable[[str], Path], tmp_path: Path
) -> None:
    binary = str(c_program("lock_orders"))
    found = recorded(shim, tmp_path / "inverted", binary, "inverted")
    [h] = found.hazards
    assert h.kind is HazardKind.LOCK_ORDER
    assert "lock_a → lock_b → lock_a" in h.summary
    # both orders, each with both of its call sites
    a_then_b = [c for c in h.cycle if c.startswith("lock_a at take_a_then_b")]
    b_then_a = [c for c in h.cycle if c.startswith("lock_b at take_b_then_a")]
    assert len(a_then_b) == len(b_then_a) == 1, h.cycle
    for order, (first, second), fn in (
        (a_then_b[0], ("lock_a", "lock_b"), "take_a_then_b"),
        (b_then_a[0], ("lock_b", "lock_a"), "take_b_then_a"),
    ):
        one = line_of("lock_orders.c", f"pthread_mutex_lock(&{first});", f"*{fn}(")
        two = line_of("lock_orders.c", f"pthread_mutex_lock(&{second});", f"*{fn}(")
        assert (
            f"{first} at {fn} (lock_orders.c:{one}) then {second} at {fn} (lock_orders.c:{two})"
            in order
        )
    assert {"take_a_then_b", "take_b_then_a", "lock_a", "lock_b"} <= set(h.locations)
    same = recorded(shim, tmp_path / "ordered", binary, "ordered")
    assert same.hazards == [] and same.processes >= 1
    # both orders in one thread: no two threads took them, so no cycle is reported
    alone = recorded(shim, tmp_path / "alone", binary, "alone")
    assert alone.hazards == []
    assert len(read_records(tmp_path / "alone").edges) == 2  # the edges were recorded


def test_fork_after_an_openmp_team_whose_child_enters_libomp(
    shim: Recorders, tmp_path: Path
) -> None:
    clang = require_tool("clang", why="LLVM's libomp survives a fork: the run passes")
    binary = tmp_path / "omp_fork_child"
    src = PROGRAMS / "omp_fork_child.c"
    built = subprocess.run(
        [clang, "-g", "-O1", "-fopenmp", "-o", str(binary), str(src)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert built.returncode == 0, f"clang -fopenmp (libomp-dev) failed: {built.stderr}"
    found = recorded_libomp(shim, tmp_path / "region", str(binary), "region")
    [h] = found.hazards
    assert h.kind is HazardKind.FORK_AFTER_OPENMP and h.runtime == "libomp"
    fork_line = line_of("omp_fork_child.c", "pid_t pid = fork();")
    assert h.where == f"start_worker (omp_fork_child.c:{fork_line})"
    assert "its child entering the runtime at team_sum (omp_fork_child.c:" in h.summary
    assert "with GNU libgomp the child deadlocks" in h.consequence
    assert any(t.runtime == "libomp" for t in h.threads)
    assert {"start_worker", "team_sum"} <= set(h.locations)
    # the same fork, a child that runs no region: safe, counted, not a hazard
    quiet = recorded(shim, tmp_path / "none", str(binary), "none")
    assert quiet.hazards == [] and (quiet.forks, quiet.safe_forks) == (1, 1)


def test_python_forks_and_locks(shim: Recorders, tmp_path: Path) -> None:
    py = sys.executable
    pool = recorded(shim, tmp_path / "pool", py, str(PROGRAMS / "py_fork_thread_pool.py"), "own")
    [h] = pool.hazards
    assert h.kind is HazardKind.FORK_WITH_THREADS
    fork_line = line_of("py_fork_thread_pool.py", "pid = os.fork()")
    assert h.python_stack[0].label() == f"main (py_fork_thread_pool.py:{fork_line})"
    workers = [t for t in h.threads if t.name.startswith("ThreadPoolExecutor")]
    assert len(workers) == 2 and all(t.stack and t.stack[0].function == "_worker" for t in workers)
    assert "DeprecationWarning" in h.consequence
    before = recorded(shim, tmp_path / "before", py, str(PROGRAMS / "py_fork_before_threads.py"))
    assert before.hazards == [] and before.forks == 0
    locks = recorded(shim, tmp_path / "locks", py, str(PROGRAMS / "pylock_inverted.py"))
    [cycle] = locks.hazards
    assert cycle.kind is HazardKind.LOCK_ORDER
    assert cycle.summary.startswith("lock-order cycle ledger (pylock_inverted.py:")
    assert {"post", "audit"} <= set(cycle.locations), cycle.locations


def test_expect_hazard_fails_a_passing_watch_and_hazards_show_on_a_pass(
    c_program: Callable[[str], Path], tmp_path: Path, cache_env: dict[str, str]
) -> None:
    binary = str(c_program("lock_orders"))
    expect = "hazard:lock-order:take_b_then_a"
    res = harness(
        "watch", "--expect", expect, "--", binary, "inverted",
        report_root=tmp_path / "expect", env=cache_env,
    )  # fmt: skip
    assert res.code == 9, res.stderr
    report = res.loaded
    assert verdict_of(report).kind is Kind.HAZARD
    assert verdict_of(report).location == "take_a_then_b"
    assert report.hazards is not None
    [h] = report.hazards.hazards
    assert h.expected is True and h.kind is HazardKind.LOCK_ORDER
    assert report.hazards.expect == expect
    assert "## Hazards" in (res.folder / "report.md").read_text()
    ok = harness(
        "watch", "--hazards", "--", binary, "ordered", report_root=tmp_path / "ok", env=cache_env
    )
    assert ok.code == 0, ok.stderr
    hazards = ok.loaded.hazards
    assert hazards is not None and hazards.hazards == []
    assert "hazards  none (" in ok.stdout  # the summary's line, on a pass


def test_records_that_do_not_parse_are_counted_never_raised(tmp_path: Path) -> None:
    folder = tmp_path / "hazards"
    folder.mkdir()
    (folder / "native-12.log").write_text(
        "I 12 1 /bin/x\nF 12 12 1\nE 12 zz\nQ 1 2\nS 12 9 0x1\nC 40 1 omp\nX\n"
    )
    (folder / "python-12.jsonl").write_text('{"event": "fork"\n[1, 2]\n{"event": "edge"}\n')
    (tmp_path / "elsewhere.log").write_text("E 1 2 t 0x1 0 0x2 0 0x3 0x4\n")
    (folder / "native-13.log").symlink_to(tmp_path / "elsewhere.log")  # not followed
    rec = read_records(folder)
    assert rec.bad_lines == 8 and rec.edges == []
    found = find_hazards(folder)
    assert found.hazards == [] and "8 hazard record line(s) did not parse" in found.notes


def test_bad_expect_is_one_line_and_bisect_reads_the_hazard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for spec, words in (("hazard:", "unknown hazard kind ''"), ("hazard:spin", "known: fork")):
        with pytest.raises(HarnessError) as info:
            parse_expect(spec)
        assert words in info.value.message and info.value.exit_code == USAGE
    assert parse_expect("hazard:lock-order:x.c:12").location == "x.c:12"
    argv = ["run", "breakout", "--expect", "hazard:nope", "--report-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        cli_main(argv)
    assert exited.value.code == USAGE
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.endswith(
        "argument --expect: 'hazard:nope': unknown hazard kind 'nope' "
        "(known: fork-with-threads, fork-after-openmp, lock-order)"
    )
    hazard = "fork() with an OpenMP team of 2 alive (libomp) at container_entry (puffer.c:175)"
    assert classify_run(Kind.HAZARD, "container_entry", "hazard", None, hazard) == BisectClass.BAD
    # seen there too
    assert classify_run(Kind.HANG, "env_start", "hazard", None, hazard) == BisectClass.BAD
    assert classify_run(Kind.PASS, None, "hazard", None, None) == BisectClass.GOOD
    assert classify_run(Kind.HANG, "env_start", "hazard", None, None) == BisectClass.SKIP


@pytest.mark.slow
def test_the_replica_built_with_clang_passes_with_its_fork_hazard_the_fixed_one_has_none(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    require_tool("clang", why="the replica passes here when built with LLVM's libomp")
    res = harness(
        "run", "breakout", "--variant", "env:CC=clang+env:REPLICA_FIX=guards", "--hazards",
        report_root=tmp_path / "clang", env=cache_env, timeout=300,
    )  # fmt: skip
    # LLVM's libomp re-initializes after fork, so this build passes; a rare hang of its child
    # (LIBOMP_CHILD_S's comment, docs/hazards.md "Known issues") is a hang told as the same
    # fork, and it must carry the same hazard
    if res.code == outcome.exit_code(Kind.HANG):
        v = verdict_of(res.loaded)
        assert [c.id for c in v.causes] == ["openmp-after-fork"], v.summary
    else:
        assert res.code == 0, res.stderr
    recorded = res.loaded.hazards
    assert recorded is not None
    [h] = recorded.hazards
    fork_line = line_of("../../upstream_pin/replica/src/puffer.c", "pid_t pid = fork();")
    region = line_of("../../upstream_pin/replica/src/vecenv.h", "static void env_start(")
    assert h.kind is HazardKind.FORK_AFTER_OPENMP and h.runtime == "libomp"
    assert h.where == f"container_entry (puffer.c:{fork_line})"
    entered = [n for n in h.locations if n.startswith("vecenv.h:")]
    assert entered and all(int(n.split(":")[1]) > region for n in entered), h.locations
    assert "1 hazard: fork() with an OpenMP team of 2 alive (libomp)" in res.stdout
    fixed = harness(
        "run", "breakout", "--variant", "fixed", "--hazards",
        report_root=tmp_path / "fixed", env=cache_env, timeout=300,
    )  # fmt: skip
    assert fixed.code == 0, fixed.stderr
    recorded = fixed.loaded.hazards
    assert recorded is not None and recorded.hazards == []
    assert recorded.safe_forks == 1  # the fork is there, its child harmless


def test_hazards_in_every_format_escaped_and_read_back(tmp_path: Path) -> None:
    """A hazard whose words are hostile (a function named like markup, a thread name with a
    pipe) renders as text in report.md and report.html, reaches the GitHub summary and an
    annotation, and report.json reads back typed."""
    hostile = "evil<script>|`x`"
    hz = Hazard(
        kind=HazardKind.FORK_WITH_THREADS,
        where=f"{hostile} (a.c:3)",
        summary=f"fork() with 1 other thread alive at {hostile} (a.c:3)",
        consequence="the child hangs; more",
        pid=7,
        location=hostile,
        locations=[hostile, "a.c:3", "a.c"],
        stack=[Site(hostile, "a.c", 3, "prog")],
        threads=[ThreadAtFork(8, "pool|1", "worker", "", [], ["lock_a at w (a.c:9)"])],
        expected=True,
    )
    report = Report("r1", tmp_path, ["harness"], RunMode.WATCH)
    report.verdict = Verdict(Kind.PASS, "exited 0")
    report.hazards = HazardReport([hz], processes=1, forks=1, expect="hazard:fork-with-threads")
    md = render_report(report)
    assert "## Hazards" in md and "evil\\<script>" in md  # as text (in headings: a code span)
    bare = [ln for ln in md.splitlines() if re.search(r"(?<!\\)<script>", ln) and "``" not in ln]
    assert bare == []
    assert "pool\\|1" in md  # a pipe would end the table's row
    page = render_html(report)
    assert "evil&lt;script&gt;" in page and "<script>|" not in page
    summary = github.summary_markdown(report)
    assert "| hazards | 1 hazard: fork() with 1 other thread alive at evil\\<script>" in summary
    [note] = [c for c in github.workflow_commands(report) if c.startswith("::warning")]
    assert "hazard fork-with-threads" in note
    data = json.loads(json.dumps(report.to_json()))
    back = report_from_json(data, tmp_path)
    assert back.hazards == report.hazards  # typed: HazardKind, Site, ThreadAtFork
    data["hazards"]["hazards"][0]["kind"] = "fork-with-spoons"
    with pytest.raises(HarnessError) as info:
        report_from_json(data, tmp_path)
    assert "hazards.hazards[0].kind" in info.value.message
