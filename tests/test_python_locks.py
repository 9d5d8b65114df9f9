"""`python-locks` on real Python lock hangs: the stdlib logging lock-order deadlock of
CPython #96727 (dictConfig against a handler's emit), a plain two-lock deadlock (a Lock
and an RLock, `with` and `acquire()`), a lock whose holder's stack no longer shows it
(owner unknown), and the healthy look-alike (the same locks in one order: it finishes).
Each lock is named with its lock-taking frame and line; the owner where a holder's frames
show the lock taken, "owner unknown" otherwise."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.causes import Cause
from harness.analysis.classify import Verdict
from harness.analysis.detectors import DETECTORS, Match, run
from harness.config.causes import NoParams
from harness.outcome import Kind
from harness.sampling.model import Frame, SampleSet, ThreadActivity, ThreadStack
from harness.sampling.sample import sample_tree
from harness.vocab import Mechanism, StackToolName
from tests.harness_cli import ROOT, verdict_of, watch_cmd, watch_opts
from tests.samples import sample_set

PROGRAMS = ROOT / "tests" / "programs"
FAST = watch_opts(startup=4, stall=4, quiescent=2, timeout=60)
needs_py_spy = pytest.mark.needs_tool("py-spy", why="Python stacks name the lock sites")
pytestmark = pytest.mark.timeout(120)


def causes(tmp_path: Path, program: str) -> tuple[Verdict, dict[str, Cause]]:
    res = watch_cmd(tmp_path / "reports", sys.executable, str(PROGRAMS / program), opts=FAST)
    verdict = verdict_of(res.loaded)
    return verdict, {c.id: c for c in verdict.causes}


def locks_now(spawn: Callable[..., Any], program: str, ready: str) -> list[Match]:
    """python-locks over a live sample of `program`, once it printed `ready` and its
    threads had a moment to block."""
    proc = spawn([sys.executable, PROGRAMS / program])
    proc.expect(ready, timeout=20)
    time.sleep(0.5)
    samples = sample_tree(proc.pid, snapshots=2, interval=0.2)
    assert any(st.python for st in samples.stacks), samples.notes
    return run(DETECTORS["python-locks"], NoParams(), samples, [])


@needs_py_spy
def test_two_lock_deadlock_names_sites_and_owners(spawn: Callable[..., Any]) -> None:
    [m] = locks_now(spawn, "pylock_two.py", "both started")
    locks = m.fields["locks"]
    assert re.search(
        r"poster \(tid \d+\) waits for journal in pylock_two\.py \(a _thread\.lock\) at "
        r"post_entry \(pylock_two\.py:15\): `journal\.acquire\(\)`, held by journaler "
        r"\(tid \d+\) since pylock_two\.py:20",
        locks,
    ), locks
    assert re.search(
        r"journaler \(tid \d+\) waits for ledger in pylock_two\.py \(a _thread\.RLock\) at "
        r"write_journal \(pylock_two\.py:23\): `with ledger:`, held by poster \(tid \d+\) "
        r"since pylock_two\.py:13",
        locks,
    ), locks
    assert m.fields["cycle"].startswith("a lock-order cycle: ")
    assert "owner unknown" not in locks


@needs_py_spy
def test_a_holder_whose_stack_does_not_show_the_lock_is_unknown(
    spawn: Callable[..., Any],
) -> None:
    [m] = locks_now(spawn, "pylock_unknown_owner.py", "checkout holds the inventory")
    parts = m.fields["locks"].split("; ")
    assert len(parts) == 2, parts
    for part in parts:
        assert "waits for inventory in pylock_unknown_owner.py" in part, part
        assert "at restock (pylock_unknown_owner.py:23): `with inventory:`" in part, part
        assert part.endswith("CPython records no owner readable from outside)"), part
        assert "owner unknown" in part and "held by" not in part
    assert m.fields["cycle"] == "no wait-for cycle read from their stacks"
    # the Event waiter holding it is no lock waiter: a wait for notify, not a lock
    assert "checkout" not in m.fields["threads"]


@pytest.mark.slow
@needs_py_spy
def test_logging_dictconfig_against_emit(tmp_path: Path) -> None:
    """CPython #96727 under the harness: the module lock against a handler's lock."""
    verdict, found = causes(tmp_path, "pylock_logging.py")
    assert (verdict.kind, verdict.mechanism) == (Kind.HANG, Mechanism.DEADLOCK)
    assert "python-locks" in found, found
    sentence = found["python-locks"].sentence
    assert re.search(
        r"emitter \(tid \d+\) waits for logging\._lock \(a _thread\.RLock\) at _acquireLock "
        r"\(__init__\.py:\d+\): `_lock\.acquire\(\)`, held by configurer \(tid \d+\) since "
        r"config\.py:\d+",
        sentence,
    ), sentence
    assert re.search(
        r"configurer \(tid \d+\) waits for Handler\.lock \(a _thread\.RLock\) at "
        r"Handler\.acquire \(__init__\.py:\d+\): `self\.lock\.acquire\(\)`, held by emitter "
        r"\(tid \d+\) since __init__\.py:\d+",
        sentence,
    ), sentence
    assert "a lock-order cycle: " in sentence
    # the program's own lines, for the remedy
    remedies = " ".join(found["python-locks"].remedies)
    assert "LookupHandler.emit (pylock_logging.py:27)" in remedies
    assert "reconfigure (pylock_logging.py:46)" in remedies


@pytest.mark.slow
@needs_py_spy
def test_two_lock_deadlock_under_the_harness(tmp_path: Path) -> None:
    verdict, found = causes(tmp_path, "pylock_two.py")
    assert verdict.kind is Kind.HANG
    assert set(found) == {"python-locks"}, found
    assert found["python-locks"].sentence.count("held by") == 2


@pytest.mark.slow
def test_the_same_order_finishes_with_no_cause(tmp_path: Path) -> None:
    verdict, found = causes(tmp_path, "pylock_ordered.py")
    assert verdict.kind is Kind.PASS and found == {}, verdict


# ---------------------------------------------------------------- waits somebody can end
# (review of issue 18, 2.6): a finding needs a cycle, or waits no other thread can end


@needs_py_spy
def test_idle_queue_consumers_are_no_lock_finding(spawn: Callable[..., Any]) -> None:
    """Two threads idle in Queue.get (a thread pool waiting for work), main joining them."""
    assert locks_now(spawn, "fp_queue_consumers.py", "consumers idle") == []


def _condition_waits(worker_cpu: float) -> SampleSet:
    """pid 10: threads 11 and 12 wait on the program's Condition (`ready.wait()`); thread 13
    does something else and used `worker_cpu` of a core between the looks."""
    wait = [
        Frame("Condition.wait", file="/usr/lib/python3.11/threading.py", line=320),
        Frame("consume", file="/nonexistent/prog.py", line=14, own=True),
    ]
    native = [Frame("PyThread_acquire_lock_timed", "libpython3.11.so.1.0")]
    stacks = [
        st
        for tid in (11, 12)
        for st in (
            ThreadStack(10, tid, f"waiter{tid}", wait, StackToolName.PY_SPY, python=True),
            ThreadStack(10, tid, f"waiter{tid}", native, StackToolName.EU_STACK),
        )
    ]
    activity = [
        ThreadActivity(10, tid, "python", ["S"] * 3, 0.0, "futex_do_wait", "202")
        for tid in (10, 11, 12)
    ]
    activity.append(ThreadActivity(10, 13, "python", ["S", "R", "S"], worker_cpu, "", "0"))
    return sample_set(activity=activity, stacks=stacks, duration_s=1.0)


def test_condition_waits_beside_a_thread_that_runs_are_no_finding() -> None:
    """The thread that still runs may notify: no finding without a cycle."""
    assert run(DETECTORS["python-locks"], NoParams(), _condition_waits(0.3), []) == []


def test_condition_waits_nobody_can_end_are_a_finding() -> None:
    s = _condition_waits(0.0)
    s.activity[-1].states = ["S"] * 3  # thread 13 stuck too: nobody can notify
    [m] = run(DETECTORS["python-locks"], NoParams(), s, [])
    assert "(a Condition: no owner)" in m.fields["locks"]
