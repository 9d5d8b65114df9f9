"""Say why: each cause on its real test case, and no cause where it does not apply (a pass,
a crash, the other hang shapes). Every case is a real program under a real harness."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.analysis.causes import Cause, Facts, check, checked_rules, diagnose
from harness.config.causes import rule_from_table, rules_from_tables, rules_of_files
from harness.errors import HarnessError
from harness.outcome import Kind
from harness.report.model import Report
from harness.vocab import EventKind, Mechanism, Trigger
from tests.harness_cli import ROOT, harness, samples_of, verdict_of, watch_cmd, watch_opts

pytestmark = pytest.mark.spread  # split test by test over the workers (conftest.py)

PROGRAMS = ROOT / "tests" / "programs"
FAST = watch_opts(startup=4, stall=4, quiescent=2, timeout=60)


def watch(tmp_path: Path, *cmd: str) -> Report:
    return watch_cmd(tmp_path / "reports", *cmd, opts=FAST).loaded


def causes(report: Report) -> dict[str, Cause]:
    return {c.id: c for c in verdict_of(report).causes}


@pytest.mark.slow
def test_lock_cycle_of_two(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    report = watch(tmp_path, str(c_program("mutex_deadlock")))
    found = causes(report)
    assert set(found) == {"lock-cycle"}, found
    sentence = found["lock-cycle"].sentence
    tids = {t.tid for p in samples_of(report).snapshots[-1].processes for t in p.threads}
    named = {int(t) for t in re.findall(r"tid (\d+)", sentence)}
    assert len(named) == 2 and named <= tids, sentence
    assert "xfer_a_to_b" in sentence and "xfer_b_to_a" in sentence


@pytest.mark.slow
def test_lock_cycle_of_three(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    found = causes(watch(tmp_path, str(c_program("mutex_cycle3"))))
    assert set(found) == {"lock-cycle"}, found
    sentence = found["lock-cycle"].sentence
    assert sentence.count("waits for mutex") == 3
    for name in ("cycle_t1", "cycle_t2", "cycle_t3"):
        assert name in sentence


@pytest.mark.slow
def test_python_locks_names_sites_and_owners(tmp_path: Path) -> None:
    found = causes(watch(tmp_path, sys.executable, str(PROGRAMS / "py_deadlock.py")))
    assert set(found) == {"python-locks"}, found
    sentence = found["python-locks"].sentence
    assert "xfer_a_to_b" in sentence and "xfer_b_to_a" in sentence
    # the owners are read from the holders' stacks (`with` lines); "owner unknown" is tested
    # in test_python_locks.py, on a holder whose stack does not show the lock
    assert "held by xfer_b_to_a" in sentence and "held by xfer_a_to_b" in sentence


@pytest.mark.slow
def test_dead_worker_named_with_its_signal(
    tmp_path: Path, c_program: Callable[[str], Path]
) -> None:
    report = watch(tmp_path, str(c_program("dead_worker")))
    found = causes(report)
    assert set(found) == {"dead-worker"}, found
    sentence = found["dead-worker"].sentence
    exits = [e for e in samples_of(report).events if e.event is EventKind.EXIT]
    assert len(exits) == 1 and exits[0].status == "killed by SIGKILL"
    # the watch loop records how it ended as data; the detector reads these, not the words
    assert (exits[0].signal, exits[0].exit_code, exits[0].status_known) == (9, None, True)
    assert f"worker pid {exits[0].pid}" in sentence and "died by SIGKILL" in sentence
    assert f"parent pid {exits[0].ppid} waits" in sentence and "read" in sentence
    # the location is the waiting parent's own frame (the worker is gone: nothing else waits)
    assert verdict_of(report).location == "wait_for_answer"


@pytest.mark.slow
def test_exit_blocked_names_the_threads(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    found = causes(watch(tmp_path, str(c_program("exit_blocked"))))
    assert set(found) == {"exit-blocked"}, found
    assert "shutdown_wait" in found["exit-blocked"].sentence
    assert "wait_for_shutdown" in found["exit-blocked"].sentence
    found = causes(watch(tmp_path / "py", sys.executable, str(PROGRAMS / "exit_blocked.py")))
    assert set(found) == {"exit-blocked"}, found
    assert "wait_for_shutdown (exit_blocked.py" in found["exit-blocked"].sentence


@pytest.mark.slow
def test_spin_on_blocked_workers(tmp_path: Path, c_program: Callable[[str], Path]) -> None:
    report = watch(tmp_path, str(c_program("spin_on_workers")))
    assert verdict_of(report).mechanism is Mechanism.SPIN
    found = causes(report)
    assert set(found) == {"spin-on-blocked-workers"}, found
    sentence = found["spin-on-blocked-workers"].sentence
    assert "wait_for_workers" in sentence and "3 thread(s)" in sentence


@pytest.mark.slow
@pytest.mark.parametrize("program", ["busy_spin", "segv"])
def test_no_cause_for_other_shapes(
    tmp_path: Path, c_program: Callable[[str], Path], program: str
) -> None:
    """A spin with no blocked workers, a crash: no cause is claimed."""
    v = verdict_of(watch(tmp_path, str(c_program(program))))
    assert v.kind in (Kind.HANG, Kind.CRASH)
    assert v.causes == []


def test_no_cause_for_a_pass(tmp_path: Path) -> None:
    v = verdict_of(watch(tmp_path, sys.executable, "-c", "print('done')"))
    assert v.kind is Kind.PASS and v.causes == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_openmp_after_fork_on_the_stock_replica(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: None
) -> None:
    res = harness("run", "breakout", "--timeout", "60", report_root=tmp_path, env=cache_env)
    report = res.loaded
    v = verdict_of(report)
    assert v.location == "env_start"
    found = causes(report)
    assert list(found) == ["openmp-after-fork"], found
    cause = found["openmp-after-fork"]
    assert "forked without exec" in cause.sentence and "libgomp" in cause.sentence
    assert "harness compare breakout --variants stock,fixed" in cause.remedies[0]
    assert cause.command.startswith("harness compare breakout --variants stock,fixed")
    assert "waits for child pid" in v.waits_for
    assert v.waits_for.endswith("which is blocked in env_start")
    # the summary puts the top cause on its own line and points at the command to try
    assert "openmp-after-fork (high)" in res.stdout
    assert "next:" in res.stdout and "harness compare breakout" in res.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_missing_dashboard_key_on_the_bare_replica(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    argv = ["run", "breakout", "--env", "REPLICA_CONTEXT=bare", "--timeout", "60"]
    report = harness(*argv, report_root=tmp_path, env=cache_env).loaded
    assert verdict_of(report).kind is Kind.ERROR_EXIT
    found = causes(report)
    assert list(found) == ["missing-dashboard-key"], found
    assert "util/gpu_percent" in found["missing-dashboard-key"].sentence


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_cause_for_the_fixed_replica(tmp_path: Path, cache_env: dict[str, str]) -> None:
    argv = ["run", "breakout", "--variant", "fixed", "--steps", "262144"]
    v = verdict_of(harness(*argv, report_root=tmp_path, env=cache_env).loaded)
    assert v.kind is Kind.PASS and v.causes == []


OWN = {
    "id": "my-known-bug",
    "detector": "output",
    "kinds": ["error-exit"],
    "params": {"regex": r"CUDA error: (?P<what>.+)"},
    "sentence": "the CUDA runtime failed: {what}",
    "confidence": "high",
    "remedies": ["try {compare}"],
    "command": "{compare}",
}
COMPARE = "harness compare breakout --variants stock,omp-free"


def test_a_pin_adds_a_cause_as_data() -> None:
    rules = checked_rules(rules_from_tables([OWN], "pin.toml [[causes]]"))
    assert rules[0].rule.id == "my-known-bug"  # a pin's own rules come first
    tail = ["x", "CUDA error: out of memory"]
    facts = Facts(Kind.ERROR_EXIT, None, None, None, tail, "breakout", compare=COMPARE)
    [cause] = diagnose(facts, rules)
    assert cause.id == "my-known-bug" and cause.sentence.endswith("out of memory")
    assert cause.remedies == [f"try {COMPARE}"] and cause.command == COMPARE
    assert cause.evidence == ["output: CUDA error: out of memory"]
    # without a fix to run (a watched command), neither the remedy nor the command is kept
    [cause] = diagnose(Facts(Kind.ERROR_EXIT, None, None, None, tail), rules)
    assert cause.remedies == [] and cause.command == ""


def refused(**change: object) -> str:
    """The one-line error for OWN with `change` applied (None: the key removed)."""
    table = {k: v for k, v in {**OWN, **change}.items() if v is not None}
    with pytest.raises(HarnessError) as info:
        check(rule_from_table(table, "pin.toml [[causes]]"))
    message = info.value.message
    assert "\n" not in message and message.startswith("pin.toml [[causes]]: cause my-known-bug: ")
    return message


def test_a_bad_rule_is_refused_in_one_line_naming_the_file_and_cause() -> None:
    assert "kinds: 'not run' is not one of pass, check-failed, hang" in refused(kinds=["not run"])
    assert "mechanisms: 'stuck' is not one of deadlock, spin" in refused(mechanisms=["stuck"])
    assert "confidence: 'sure' is not one of high, medium, low" in refused(confidence="sure")
    unknown = refused(detector="magic")
    assert re.search(r"unknown detector 'magic' \(known: [a-z-]+, [a-z-]+", unknown)
    assert "missing required key 'sentence'" in refused(sentence=None)
    assert "unknown key(s) remedy" in refused(remedy="typo")


def test_params_are_checked_against_the_detector_declaration() -> None:
    """What a detector takes is declared by the detector, not special-cased by the loader."""
    assert "detector output needs params.regex" in refused(params={})
    assert "bad regex '(unclosed'" in refused(params={"regex": "(unclosed"})
    message = refused(detector="frames", params={"regex": "x"})
    assert "detector frames takes functions?, not params.regex" in message
    assert "params.functions must be a list" in refused(
        detector="frames", params={"functions": "f"}
    )
    assert "bad regex" in refused(detector="frames", params={"functions": ["ok", "[bad"]})
    spin = {"detector": "spin-on-blocked-workers", "kinds": ["hang"], "sentence": "{tid}"}
    assert "params.busy_fraction must be a float" in refused(**spin, params={"busy_fraction": "x"})
    ok = check(rule_from_table({**OWN, **spin, "params": {"busy_fraction": 1}}, "pin"))
    assert ok.params.busy_fraction == 1.0


def test_template_fields_are_the_detector_fields() -> None:
    """A typo in a field is refused at load, not shown as `{whta}` after a run."""
    message = refused(sentence="failed: {whta}")
    assert "{whta} in 'failed: {whta}' is not a field of detector output" in message
    assert "(it gives: compare, env, line, location, log, stacks, what)" in message
    assert "bad template" in refused(remedies=["{0}"])
    assert "bad template" in refused(command="{compare!r}")


def test_the_shipped_rules_meet_their_detectors() -> None:
    rules = checked_rules()
    assert [c.rule.id for c in rules] == [
        "openmp-after-fork",
        "lock-cycle",
        "python-locks",
        "dead-worker",
        "exit-blocked",
        "missing-dashboard-key",
        "spin-on-blocked-workers",
        "collective-mismatch",
        "missing-rank",
        "collective-timeout",
        "mpi-peers-blocked",
        "pipe-never-read",
        "queue-not-drained",
        "pool-lost-worker",
        "fork-with-threads",
        # data/causes/wake.toml: the wake graph's readings, fallbacks in this order
        "held-by-departed",
        "gil-held-blocking",
        "late-waker",
        "file-lock-cycle",
        "ipc-cycle",
        "mutex-cycle",
        "futex-cycle",
        "dead-waker",
        "polling-loop",
        "lock-held-by-self",
        "no-waker",
    ]
    assert [c.rule.id for c in rules if c.rule.fallback] == [c.rule.id for c in rules][15:]
    assert {c.rule.id: c.rule.command for c in rules if c.rule.command} == {
        "openmp-after-fork": "{compare}",
        "missing-dashboard-key": "{compare}",
        "spin-on-blocked-workers": "{compare}",
    }


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_active_wait_policy_spins_in_the_pool_but_is_located_in_env_start(
    tmp_path: Path, cache_env: dict[str, str], libgomp_fork_hazard: None
) -> None:
    """OMP_WAIT_POLICY=active: the parent's idle OpenMP pool spins (a core busy in libgomp,
    no code of the program) while the forked child's team waits in futexes. The child's
    threads can only wake each other: a closed set of the wake graph, a deadlock of the
    child while the parent spins, located where the program is stuck, with the same cause
    (before the wake graph: a spin at the startup window)."""
    argv = ["run", "breakout", "--env", "OMP_WAIT_POLICY=active", "--startup", "8"]
    report = harness(*argv, "--timeout", "60", report_root=tmp_path, env=cache_env).loaded
    v, samples = verdict_of(report), samples_of(report)
    got = (report.trigger, v.mechanism, v.location)
    assert got == (Trigger.CLOSED, Mechanism.DEADLOCK, "env_start"), v.summary
    # the parent's main thread waits for the child (in the set), its pool spins (not)
    assert report.exit is not None and samples.wake is not None
    parent = report.exit.pid
    closed = {(p, t) for p, t in samples.wake.closed}
    assert (parent, parent) in closed
    pool = [w for w in samples.waits if w.pid == parent and w.tid != parent]
    assert pool and all((w.pid, w.tid) not in closed for w in pool), pool
    assert list(causes(report)) == ["openmp-after-fork"]


def test_a_pin_carries_its_parsed_rules_own_first(tmp_path: Path) -> None:
    """`Pin.causes`: a pin's own [[causes]] before those of the pin it extends; a bad one
    fails when the pin is loaded, naming the pin's file and the cause."""
    from harness.config.pin import load_pin

    def pin(name: str, extends: str, cause: str, kind: str = "hang") -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'schema_version = 1\nname = "{name}"\nextends = "{extends}"\n\n'
            f'[[causes]]\nid = "{cause}"\ndetector = "frames"\nkinds = ["{kind}"]\n'
            f'params = {{ functions = ["f.*"] }}\nsentence = "in {{function}}"\n'
        )
        return path

    pin("base", "replica", "base-cause")
    child = pin("child", "base.toml", "child-cause")
    loaded = load_pin(str(child))
    assert [r.id for r in loaded.causes] == ["child-cause", "base-cause"]
    assert loaded.causes[0].kinds == (Kind.HANG,) and loaded.causes[0].where.startswith("child")
    assert [c.rule.id for c in checked_rules(loaded.causes)][:3] == [
        "child-cause",
        "base-cause",
        "openmp-after-fork",
    ]
    bad = pin("bad", "replica", "bad-cause", kind="not run")
    with pytest.raises(HarnessError) as info:
        load_pin(str(bad))
    assert info.value.message.startswith("bad.toml [[causes]]: cause bad-cause: kinds: 'not run'")


def test_next_shows_the_cause_command_else_the_fix_compare(tmp_path: Path) -> None:
    """The summary's `next:` is the top cause's `command` field (not a remedy's prose);
    without one, a hang offers the verdict's compare of the pin's fixes."""
    from harness.report.console import next_step
    from harness.report.load import report_from_json

    cause = {"id": "c", "sentence": "s", "confidence": "high", "remedies": ["harness doctor"]}
    verdict = {"kind": "hang", "summary": "hang", "compare": COMPARE}
    with_command = {**verdict, "causes": [{**cause, "command": "harness compare x"}]}
    report = report_from_json({"env": "breakout", "verdict": with_command}, tmp_path)
    assert next_step(report, Kind.HANG) == "harness compare x"
    report = report_from_json(
        {"env": "breakout", "verdict": {**verdict, "causes": [cause]}}, tmp_path
    )
    assert next_step(report, Kind.HANG) == f"does the fix help? {COMPARE}"
    (tmp_path / "stacks.txt").write_text("")
    report = report_from_json({"env": "breakout", "verdict": {**verdict, "compare": ""}}, tmp_path)
    assert next_step(report, Kind.HANG) == f"every thread's stack: {tmp_path / 'stacks.txt'}"


def test_cause_files_share_one_id_space(tmp_path: Path) -> None:
    """Shipped causes live in causes.toml and causes/*.toml: a family is a file, and an id
    used twice across files is refused naming both files."""
    rule = (
        '[[causes]]\nid = "{id}"\ndetector = "dead-worker"\nkinds = ["hang"]\n'
        'sentence = "worker {{pid}} died"\n'
    )
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text("schema_version = 1\n" + rule.format(id="one"))
    second.write_text("schema_version = 1\n" + rule.format(id="two"))
    rules = rules_of_files([("a.toml", first), ("b.toml", second)])
    assert [r.id for r in rules] == ["one", "two"]
    second.write_text("schema_version = 1\n" + rule.format(id="one"))
    with pytest.raises(HarnessError, match=r"b\.toml.*one.*second rule.*first is in a\.toml"):
        rules_of_files([("a.toml", first), ("b.toml", second)])


def test_a_remedy_never_advises_the_call_the_run_is_stuck_in() -> None:
    """ipc-cycle's "Popen.communicate() instead of wait()" to a program stuck in
    Popen.communicate is no remedy; communicate(timeout=...) is another call."""
    from harness.analysis.causes import advises_stuck_call

    advice = "read and write at once: Popen.communicate() instead of wait(), a thread"
    assert advises_stuck_call(advice, ["Popen.communicate", "<module>"]) == "Popen.communicate"
    assert advises_stuck_call(advice, ["Popen.wait"]) is None  # advised against
    assert advises_stuck_call(advice, ["Queue.get", "<module>"]) is None
    assert advises_stuck_call("use communicate(timeout=5)", ["Popen.communicate"]) is None
    assert advises_stuck_call("call recommunicate() first", ["communicate"]) is None
