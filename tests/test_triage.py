"""`harness triage ENV` (docs/triage.md): the budget's grammar and rules, the exit codes,
--resume's refusals, and the replica end to end: one command that reproduces the hang in
env_start, names openmp-after-fork, rules the pin's knobs out, confirms the fix and skips
History for a path source; a budget too small for every step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness import outcome
from harness.errors import HarnessError
from harness.outcome import Kind
from harness.triage import budget
from harness.triage.model import SCHEMA_VERSION, Step, TriageResult
from harness.triage.results import ExplainResult, FixesResult, KnobsResult, ReproduceResult
from harness.triage.run import exit_code
from harness.vocab import StepStatus, TriageStep
from tests.harness_cli import ROOT

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

# `harness triage` whether or not the command is registered in harness.cli yet
_MAIN = """
import sys
from harness import cli
from harness.cli import triage

if "triage" not in cli.COMMANDS:
    cli._MODULES = (*cli._MODULES, triage)
    cli.COMMANDS["triage"] = triage.command
sys.exit(cli.main(sys.argv[1:]))
"""
FAST = ["--startup", "8", "--stall", "8", "--jobs", "2"]
# shorter runs for the end-to-end triage, its conclusions unchanged: a run that passes (the
# fix) trains one epoch, not the scenario's four (pass against hang is what is judged; the
# hang comes before the first epoch whatever the steps), and the env_start deadlock is
# called quiescent after 2 s instead of the default 5 (the same verdict, stack and cause;
# test_quiescence.py checks the rule on this very hang). Not for the budget test: its
# steps' estimates come from measured run costs, and it needs them too long for its budget.
SHORT_RUNS = ["--steps", "262144", "--quiescent", "2"]
# the replica with one of its shipped knobs: the cause's knobs (OMP_WAIT_POLICY,
# OMP_THREAD_LIMIT) still come on top, so the Knobs step shows all three effects
TRIMMED_PIN = """schema_version = 1
name = "replica-triage"
extends = "replica"

[triage]
knobs = [{ set = "vec.num_buffers", values = ["4"] }]
hosts = ["container-1cpu"]
"""


def triage(
    *args: str, report_dir: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", _MAIN, "triage", *args, "--report-dir", str(report_dir)]
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )


def _folder(report_dir: Path) -> Path:
    found = [d for d in report_dir.iterdir() if d.is_dir() and "-triage-" in d.name]
    assert len(found) == 1, found
    return found[0]


def _loaded(folder: Path) -> tuple[dict[str, Any], TriageResult]:
    """triage.json, and the model read back from it (the schema round-trips)."""
    data = json.loads((folder / "triage.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["mode"] == "triage"
    result = TriageResult.from_json(data, folder)
    assert result.to_json() == data
    assert [s.name for s in result.steps] == list(TriageStep)
    return data, result


# ---------------------------------------------------------------- the budget, pure


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("900", 900.0), ("90s", 90.0), ("15m", 900.0), ("1h30m", 5400.0), ("2.5m", 150.0)],
)
def test_budget_takes_seconds_or_a_duration(text: str, seconds: float) -> None:
    assert budget.parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "15x", "m", "1m1m", "nan", "inf", "30m5h5h"])
def test_a_bad_budget_is_a_usage_error(text: str) -> None:
    with pytest.raises(HarnessError) as exc:
        budget.parse_budget(text)
    assert exc.value.exit_code == outcome.USAGE and "\n" not in exc.value.message


def test_the_order_is_most_informative_first() -> None:
    assert budget.ORDER == (
        TriageStep.REPRODUCE,
        TriageStep.EXPLAIN,
        TriageStep.FIXES,
        TriageStep.KNOBS,
        TriageStep.HISTORY,
    )
    assert set(budget.ORDER) == set(TriageStep)


def test_a_step_that_does_not_fit_says_what_it_needs() -> None:
    assert budget.skip_reason(100.0, 100.0) is None
    assert budget.skip_reason(240.4, 90.2) == "needs about 240 s, 90 s left"
    assert budget.skip_reason(10.0, -3.0) == "needs about 10 s, 0 s left"


def test_estimates_follow_the_measured_costs() -> None:
    costs = budget.Costs(run_s=10.0, build_s=20.0, jobs=2)
    # the first round of two variants, 2 at once: 4 rounds of 10 s, one cold build
    assert budget.estimate_fixes(costs, 2, 1) == 4 * 10.0 + 20.0
    costs.cache_warm = True
    assert budget.estimate_fixes(costs, 2, 1) == 40.0
    # --repeat auto's cap within the time left: never below the first round, never above
    assert budget.cap_for(costs, 2, 100.0, 20) == 10
    assert budget.cap_for(costs, 2, 5.0, 20) == budget.FIRST_ROUND
    assert budget.cap_for(costs, 2, 10_000.0, 20) == 20


def test_exit_codes_say_reproduced_and_fixed() -> None:
    result = TriageResult("breakout", Path("."), [Step(n) for n in TriageStep])
    assert exit_code(result) == outcome.TriageExit.NOT_REPRODUCED
    result.reproduced = True
    assert exit_code(result) == outcome.TriageExit.NOT_FIXED
    result.fix_confirmed = "fixed"
    assert exit_code(result) == outcome.TriageExit.FIXED
    codes = {int(c) for c in outcome.TriageExit}
    assert len(codes) == 4 and not codes & {outcome.USAGE, outcome.HANG}


# ---------------------------------------------------------------- --resume refuses, one line


def _step_json(field: str) -> str:
    """A triage.json whose finished Reproduce step has `field` (raw JSON text)."""
    step = f'{{"name": "reproduce", "status": "done", {field}}}'
    return f'{{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": [{step}]}}'


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": [', "not valid JSON"),
        ('{"mode": "triage", "schema_version": 99, "env": "breakout"}', "newer"),
        ('{"mode": "bisect", "schema_version": 1}', "not a harness triage"),
        ('{"mode": "triage", "schema_version": 1, "env": "cartpole", "steps": []}', "cartpole"),
        ('{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": [{}]}', "damaged"),
        # found by review: values of the wrong type in a finished step were a traceback
        (_step_json('"runs_made": Infinity'), "is not a count"),
        (_step_json('"duration_s": "12"'), "is not a number of seconds"),
        # a result is read by its step's dataclass (triage/results.py): the key is named
        (
            _step_json('"result": {"run_s": "abc"}'),
            "result.run_s: expected a number, found a string",
        ),
        (_step_json('"result": {"run_s": -1}'), "result.run_s: must be >= 0, not -1"),
        (_step_json('"result": {"counts": {"hang": "x"}}'), "result.counts.hang: "),
        (
            _step_json('"result": {"counts": {"hung": 1}}'),
            'result.counts.hung: "hung" is not one of pass',
        ),
        (_step_json('"result": {"kind": "bogus"}'), 'result.kind: "bogus" is not one of'),
        (_step_json('"result": {"failure_rate": 1.5}'), "result.failure_rate: must be <= 1"),
        (_step_json('"result": [1]'), "step reproduce: result: expected an object, found an array"),
        # the host is the doctor's typed fingerprint, read back by pydantic too
        (
            '{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": [], '
            '"host": {"cpus_online": "two"}}',
            "host.cpus_online: ",
        ),
    ],
)
def test_resume_refuses_a_damaged_or_newer_triage(
    tmp_path: Path, content: str, said: str, cache_env: dict[str, str]
) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "triage.json").write_text(content)
    res = triage(
        "breakout", "--resume", str(folder), report_dir=tmp_path / "r", env=cache_env, timeout=60
    )
    assert res.returncode == outcome.USAGE, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_resume_refuses_a_steps_folder_that_links_out(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    """A resumed folder whose `steps` is a symbolic link out of it: setting a step's old
    try aside would rename files wherever it points. One line, nothing moved."""
    folder = tmp_path / "old"
    outside = tmp_path / "outside"
    (outside / "reproduce").mkdir(parents=True)
    folder.mkdir()
    (folder / "steps").symlink_to(outside)
    (folder / "triage.json").write_text(
        '{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": []}'
    )
    res = triage(
        "breakout", "--resume", str(folder), report_dir=tmp_path / "r", env=cache_env, timeout=60
    )
    assert res.returncode == outcome.USAGE, res.stderr
    assert (
        "a symbolic link" in res.stderr.strip().splitlines()[-1] and "Traceback" not in res.stderr
    )
    assert (outside / "reproduce").is_dir() and list(outside.iterdir()) == [outside / "reproduce"]


def test_resume_of_a_missing_folder_and_a_link_out(tmp_path: Path) -> None:
    """A triage.json that is a symlink out of its folder is refused like a report's."""
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"mode": "triage", "schema_version": 1, "env": "breakout", "steps": []}')
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "triage.json").symlink_to(outside)
    for target in (folder, tmp_path / "missing"):
        res = triage("breakout", "--resume", str(target), report_dir=tmp_path / "r", env={})
        assert res.returncode == outcome.USAGE, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


# ---------------------------------------------------------------- the replica, end to end


def _step(result: TriageResult, name: TriageStep) -> Step:
    return result.step(name)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_replica_triage(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: str
) -> None:
    """One `harness triage breakout` on the replica (a pin that extends it with one knob of
    the shipped list, to keep the test short: every knob costs 4 runs per value): the hang
    reproduced in env_start and explained as openmp-after-fork, the pin's knob that does not
    matter ruled out, the cause's knobs judged, the fix confirmed, History skipped (a path
    source), triage.json valid. The shipped pin's full triage, cold and warm, is timed in
    docs/triage.md."""
    pin = tmp_path / "replica-triage.toml"
    pin.write_text(TRIMMED_PIN)
    times = {}
    for label in ("warm",):
        start = time.monotonic()
        res = triage("breakout", "--pin", str(pin), *FAST, *SHORT_RUNS,
                     report_dir=tmp_path / label, env=cache_env, timeout=800)  # fmt: skip
        times[label] = time.monotonic() - start
        assert res.returncode == outcome.TriageExit.FIXED, res.stderr[-3000:] + res.stdout
        data, result = _loaded(_folder(tmp_path / label))
        assert result.reproduced and result.fix_confirmed == "fixed"
        assert result.finished_at and result.host is not None and result.host.kernel
        assert all(s.status is not StepStatus.PENDING for s in result.steps)

        rep = result.found(ReproduceResult)
        assert (rep.kind, rep.location, rep.cause) == ("hang", "env_start", "openmp-after-fork")
        assert rep.runs == budget.FIRST_ROUND and rep.counts == {Kind.HANG: 4}  # alike: stop
        assert rep.first_failure is not None
        assert (result.directory / rep.first_failure / "report.json").is_file()

        exp = result.found(ExplainResult)
        assert exp.causes[0].id == "openmp-after-fork" and exp.location == "env_start"
        assert any("waits for child" in w for w in exp.waits), exp.waits
        assert "no history to blame" in exp.blame_skipped
        probes = {d.name: d for d in exp.doctor}
        assert "libgomp fork hazard" in probes["openmp-after-fork"].detail

        knobs = {k.label: k for k in result.found(KnobsResult).knobs}
        assert knobs["--vec.num_buffers"].effect == "ruled-out", knobs["--vec.num_buffers"]
        assert "OMP_WAIT_POLICY" in knobs  # the top cause's knobs come after the pin's
        # a team of one needs no pool thread: the hang goes (the pin's and the cause's note)
        assert knobs["OMP_THREAD_LIMIT"].effect == "changes", knobs["OMP_THREAD_LIMIT"]
        for k in knobs.values():
            assert (result.directory / (k.folder or "?") / "sweep.json").is_file()

        fixes = result.found(FixesResult)
        assert fixes.fix_variant == "fixed" and fixes.decision == "confirmed"
        assert any("omp-free" in c or "patch" in c for c in fixes.changes)
        assert (result.directory / (fixes.folder or "?") / "compare.json").is_file()

        history = _step(result, TriageStep.HISTORY)
        assert history.status is StepStatus.SKIPPED and "no git source" in history.reason

        assert result.commands[0].startswith(f"harness run breakout --variant stock --pin {pin}")
        assert result.commands[1].startswith("harness compare breakout --variants stock,fixed")
        for s in result.steps:  # every run folder a step names is in the triage folder
            for rel in s.runs:
                assert (result.directory / rel).exists(), rel
        for name in ("triage.html", "issue.md"):
            assert (result.directory / name).is_file(), name
        assert data["spent_s"] > 0
    print(f"\ntriage breakout wall time: {times['warm']:.0f} s")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_budget_too_small_skips_steps_with_their_reason(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: str
) -> None:
    """--budget 2: Reproduce runs its first round anyway; the steps that do not fit the
    rest are skipped with what they need, and triage.json is complete and valid."""
    # 2 s: a run takes about 2 s since the closed-set verdict (1.4 s) and two run at once,
    # so Reproduce's first round (4 runs) uses it all, whatever the host's speed
    res = triage("breakout", *FAST, "--budget", "2", report_dir=tmp_path, env=cache_env)
    assert res.returncode == outcome.TriageExit.NOT_FIXED, res.stderr[-3000:]
    _, result = _loaded(_folder(tmp_path))
    assert result.reproduced and result.finished_at
    assert _step(result, TriageStep.REPRODUCE).status is StepStatus.DONE
    skipped = [s for s in result.steps if s.status is StepStatus.SKIPPED]
    by_budget = [s for s in skipped if re.fullmatch(r"needs about \d+ s, \d+ s left", s.reason)]
    assert {s.name for s in by_budget} >= {TriageStep.FIXES, TriageStep.KNOBS}, skipped
    assert all(s.estimate_s and s.runs_made == 0 for s in by_budget)
    assert all(s.status is not StepStatus.PENDING for s in result.steps)
    assert any("needs about" in line for line in result.conclusion)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_not_reproduced_here_nor_under_the_pins_host(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: str
) -> None:
    """The stock build with the replica's fixes compiled in (REPLICA_FIX, an input of the
    build the pin passes through): it passes here and under the pin's container-1cpu
    profile; the triage says so and exits 7, its other steps skipped with why."""
    res = triage(
        "breakout",
        *FAST,
        "--steps",
        "262144",
        report_dir=tmp_path,
        env={**cache_env, "REPLICA_FIX": "omp,guards"},
    )
    assert res.returncode == outcome.TriageExit.NOT_REPRODUCED, res.stderr[-3000:]
    _, result = _loaded(_folder(tmp_path))
    rep = result.found(ReproduceResult)
    assert [t.host for t in rep.tried_hosts] == [None, "container-1cpu"]
    assert all(t.summary.startswith("pass 4/4") for t in rep.tried_hosts)
    assert rep.first_failure is None and not result.reproduced
    for name in (TriageStep.EXPLAIN, TriageStep.FIXES, TriageStep.KNOBS, TriageStep.HISTORY):
        s = _step(result, name)
        assert s.status is StepStatus.SKIPPED and s.reason.startswith("nothing reproduced")


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((folder / "triage.json").read_text())
    except (OSError, ValueError):
        return None
    return data
