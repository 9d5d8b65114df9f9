"""`--repeat N`, `--until-fail` and `--jobs` on real programs: every run a child harness
with its own report folder, the runs told together (repeat.json, report.html, the summary
line), a lock-order race that deadlocks in only some runs reported with both outcomes and
its hangs under one signature, and nothing left behind, interrupted or not."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.outcome import Kind
from harness.process import proctree, zygote_server
from harness.report.load import load_report
from harness.stats import wilson
from harness.vocab import RunStatus
from tests.harness_cli import ROOT, harness, verdict_of

pytestmark = pytest.mark.timeout(300)
# a deadlocked C program is quiescent at once: a verdict about a second after its start
FAST = ("--startup", "5", "--stall", "5", "--quiescent", "1", "--timeout", "30", "--quiet")


def aggregate_of(root: Path) -> tuple[Path, dict[str, Any]]:
    (folder,) = [p.parent for p in root.glob("*/repeat.json")]
    data: dict[str, Any] = json.loads((folder / "repeat.json").read_text())
    return folder, data


def _is_harness(argv: list[str]) -> bool:
    """`python -m harness ...` or a zygote (whose forks show its argv), by argv, not by a
    substring: the checkout's own path may contain "harness"."""
    return argv[1:3] in (["-m", "harness"], ["-m", zygote_server.__name__])


def _watched(p: psutil.Process) -> bool:
    """Some ancestor of `p` is a live harness (its run's, or the zygote of a test running
    in another worker at the same time: those programs are not this test's leftovers)."""
    with contextlib.suppress(psutil.Error):
        return any(_is_harness(a.cmdline()) for a in p.parents())
    return False


def left_running(name: str) -> list[psutil.Process]:
    """Processes named `name` that outlived every harness above them."""
    found = []
    for p in psutil.process_iter(["name", "status"]):
        named = p.info["name"] == name[:15] and p.info["status"] != psutil.STATUS_ZOMBIE
        if named and not _watched(p):
            found.append(p)
    return found


def trainers_of(pid: int, name: str) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        kids = psutil.Process(pid).children(recursive=True)
        return [p for p in kids if p.name() == name[:15] and proctree.living(p)]
    return []


def test_three_runs_of_a_deadlock(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    exe = c_program("mutex_deadlock")
    res = harness("watch", "--repeat", "3", "--jobs", "2", *FAST, "--", str(exe),
                  report_root=tmp_path)  # fmt: skip
    assert res.code == 2, res.stdout + res.stderr  # the hang's exit code
    folder, data = aggregate_of(tmp_path)
    assert (data["mode"], data["runs"], data["counts"]) == ("repeat", 3, {"hang": 3})
    assert data["hang_rate"] == 1.0 and data["hang_rate_ci95"][0] == pytest.approx(0.4385, 1e-3)
    (group,) = data["groups"]
    assert (group["kind"], group["cause"], group["count"]) == ("hang", "lock-cycle", 3)
    assert group["location"] == "transfer_a_to_b"
    runs = sorted((folder / "runs").iterdir())
    assert [r.name for r in runs] == ["001", "002", "003"]
    for run, row in zip(runs, data["rows"], strict=True):
        (report,) = run.glob("*/report.json")
        assert row["report_dir"] == str(report.parent) and row["values"] == {"run": run.name[-1]}
        assert verdict_of(load_report(report)).kind is Kind.HANG
    assert "hang 3/3 (100%, 95% CI 44–100%) — all in transfer_a_to_b (lock-cycle)" in res.stdout
    page = (folder / "report.html").read_text()
    assert page.count(">report</a>") == 3 and "hang 3/3" in page
    assert not left_running(exe.name)


def test_a_race_that_deadlocks_sometimes(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    """`--repeat 30` on a lock-order race: both outcomes, every hang one lock-cycle group,
    and a rate that agrees with the one plain runs of the same program measure.

    Agreement is checked at 99.9%: the two intervals overlap. A 95% interval misses the true
    rate in 5% of measurements by construction, and "the harness's 95% interval holds the
    plain runs' estimate" would fail about one test in eight at these counts (two noisy
    estimates of about 50%); at 99.9% a false failure needs a 4-sigma gap (under 1e-4),
    while a harness that miscounts (hangs called passes, or the reverse) still fails it."""
    from tests.test_sometimes_programs import plain_hang_rate

    exe = c_program("flaky_lockorder")
    hangs, runs = plain_hang_rate(exe, 60, 0.5)
    res = harness("watch", "--repeat", "30", "--jobs", "2", "--json", *FAST, "--", str(exe),
                  report_root=tmp_path, timeout=280)  # fmt: skip
    _, data = aggregate_of(tmp_path)
    assert json.loads(res.stdout)["runs"] == 30 == data["runs"]
    counts = data["counts"]
    assert counts.get("hang", 0) >= 1 and counts.get("pass", 0) >= 1, counts
    assert set(counts) == {"hang", "pass"}, counts
    (group,) = data["groups"]  # every hang alike
    assert (group["kind"], group["cause"], group["count"]) == ("hang", "lock-cycle", counts["hang"])
    lo, hi = data["hang_rate_ci95"]
    assert (lo, hi) == pytest.approx(wilson(counts["hang"], 30))
    z999 = 3.2905  # two-sided 99.9%
    ours, plain = wilson(counts["hang"], 30, z999), wilson(hangs, runs, z999)
    assert ours[0] <= plain[1] and plain[0] <= ours[1], (counts, hangs, runs)
    assert res.code == 2
    assert not left_running(exe.name)


def test_until_fail_stops_at_the_first_failure(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    exe = c_program("mutex_deadlock")
    res = harness("watch", "--repeat", "5", "--until-fail", *FAST, "--", str(exe),
                  report_root=tmp_path)  # fmt: skip
    _, data = aggregate_of(tmp_path)
    assert res.code == 2 and data["runs"] == 1 and data["counts"] == {"hang": 1}, data
    ok = harness("watch", "--repeat", "3", "--until-fail", *FAST, "--", "true",
                 report_root=tmp_path / "ok")  # fmt: skip
    _, data = aggregate_of(tmp_path / "ok")
    assert ok.code == 0 and data["counts"] == {"pass": 3}, ok.stderr
    assert data["summary"].startswith("pass 3/3: no failure (failure rate 95% CI 0–56%)")


def test_bad_repeat_input_is_one_line(tmp_path: Path) -> None:
    for args, text in [
        (("--repeat", "0"), "--repeat takes a positive number or auto, not '0'"),
        (("--repeat", "many"), "--repeat takes a positive number or auto, not 'many'"),
        (("--repeat", "auto"), "--repeat auto is for compare and bisect; give a number"),
        (
            ("--repeat", "2", "--until-fail", "--jobs", "x"),
            "argument --jobs: not a whole number: 'x'",
        ),
    ]:
        res = harness("watch", *args, "--", "true", report_root=tmp_path)
        assert res.code == 5, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert "Traceback" not in res.stderr and not list(tmp_path.iterdir()), res.stderr
        # ours: one line; argparse's own: its usage, then one line that says what is wrong
        assert text in lines[-1] and (len(lines) == 1 or lines[0].startswith("usage:")), lines


def two_runs_hanging(exe: Path, report_dir: Path) -> subprocess.Popen[bytes]:
    """`harness watch --repeat 4 --jobs 2` of a deadlock, returned once both of its first
    two runs' trainers are up (a long quiescence window keeps them hanging unjudged)."""
    argv = [sys.executable, "-m", "harness", "watch", "--repeat", "4", "--jobs", "2",
            "--quiescent", "60", "--stall", "60", "--quiet", "--report-dir", str(report_dir),
            "--", str(exe)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(trainers_of(proc.pid, exe.name)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "runs never started"
            time.sleep(0.2)
    except BaseException:
        proc.kill()
        raise
    return proc


def test_an_interrupt_stops_every_run(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    """SIGINT while two runs hang (a long quiescence window keeps them running): both child
    harnesses are stopped, their trainers killed, and the harness exits 130."""
    exe = c_program("mutex_deadlock")
    proc = two_runs_hanging(exe, tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert not left_running(exe.name)
    partial = list(tmp_path.glob("*/runs/*/*/report.json"))
    assert len(partial) == 2, partial
    for report in partial:
        assert load_report(report).status is RunStatus.INTERRUPTED
    # the aggregate of what finished is written, and the last line names its folder
    folder, data = aggregate_of(tmp_path)
    assert data["runs"] == 2 and data["counts"] == {"interrupted": 2}, data
    assert data["conclusion"][-1].startswith("interrupted by signal 2 after 2 finished run(s)")
    assert err.decode().strip().splitlines()[-1] == (
        f"harness: interrupted by signal 2 after 2 finished run(s); their table and every "
        f"run's report: {folder}"
    )


def test_a_sigkilled_harness_leaves_no_run_behind(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """SIGKILL of the harness (an OOM kill, a CI step timeout): the zygote that forked the
    child harnesses dies with it (PR_SET_PDEATHSIG), each child harness with the zygote (its
    own PR_SET_PDEATHSIG), and each child's own reaper kills its trainer: nothing of the
    tree is left."""
    exe = c_program("mutex_deadlock")
    proc = two_runs_hanging(exe, tmp_path)
    try:
        tree = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.is_running()]
        trainers = [p for p in tree if p.name() == exe.name[:15]]
        # the zygote, two child harnesses and their reapers, two trainers
        assert len(trainers) == 2 and len(tree) >= 7, tree
        proc.kill()
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, alive
        deadline = time.monotonic() + 10
        while left_running(exe.name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left_running(exe.name)
    finally:
        proc.kill()


def test_every_command_formats_its_help() -> None:
    """argparse %-formats each option's help: a bare "95%" in one (the repeat group's)
    turned every `--help` of run, watch, compare and sweep into an internal error."""
    import argparse

    from harness.cli import COMMANDS, build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(COMMANDS) <= set(sub.choices)
    for name, command_parser in sub.choices.items():
        assert command_parser.format_help().startswith("usage:"), name


def test_cpus_1_hangs_a_pool_sized_from_affinity_and_diff_names_it(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    """A pool sized from the CPUs it may use, waiting on a barrier sized from the CPUs
    online: it passes on this host, hangs under `--cpus 1`, and `harness diff` of the two
    reports names the trainer's CPU affinity first, next to the verdicts."""
    from harness.doctor.fingerprint import cpu_ranges
    from harness.execute.conditions import allowed_cpus

    if len(allowed_cpus()) < 2:
        from tests.facts import missing

        missing("two usable CPUs", "a pool sized from one CPU count, a barrier from another")
    exe = c_program("cpu_sized")
    ok = harness("watch", *FAST, "--", str(exe), report_root=tmp_path / "here")
    hung = harness("watch", "--cpus", "1", *FAST, "--", str(exe), report_root=tmp_path / "one")
    assert (ok.code, hung.code) == (0, 2), hung.stderr
    where = verdict_of(hung.loaded).location
    assert where in ("reduce_shard", "main"), hung.loaded.verdict
    res = harness("diff", "--json", str(hung.folder), str(ok.folder), report_root=tmp_path)
    assert res.code == 1, res.stderr  # the verdicts differ
    data = json.loads(res.stdout)
    first = data["differences"][0]
    assert (first["section"], first["key"]) == ("host", "trainer_affinity"), data["differences"]
    cpus = allowed_cpus()
    assert (first["a"], first["b"]) == (str(cpus[0]), cpu_ranges(list(cpus)))
    kinds = next(v for v in data["verdicts"] if v["key"] == "kind")
    assert (kinds["a"], kinds["b"], data["verdicts_differ"]) == ("hang", "pass", True)
