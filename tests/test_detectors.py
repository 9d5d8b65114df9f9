"""Each detector on the samples of a real run it was written for (tests/data/samples/, where
each comes from is in tests/data/README.md), and on every other real run, where it must find
nothing. No processes: the files are loaded with the report loader, as `harness report`
reads a saved report."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.detectors import DETECTORS, Detector, Match, run
from harness.analysis.detectors.patterns import FramesParams, OutputParams
from harness.analysis.detectors.threads import SpinParams
from harness.config.causes import NoParams, describe_params
from harness.report.load import report_from_json
from harness.sampling.model import SampleSet
from harness.vocab import EventKind

DATA = Path(__file__).resolve().parent / "data" / "samples"
CAUSES_TOML = Path(__file__).resolve().parent.parent / "harness" / "data" / "causes.toml"
REGEX = re.compile(r"missing key \[(?P<section>[^\]]*)\] (?P<key>\S+)")  # causes.toml's


def samples(name: str) -> SampleSet:
    data = json.loads((DATA / f"{name}.json").read_text())
    loaded = report_from_json({"samples": data}, DATA).samples
    assert loaded is not None and loaded.snapshots, name
    return loaded


def tail(name: str) -> list[str]:
    lines = json.loads((DATA / f"{name}.output.json").read_text())
    assert isinstance(lines, list) and lines
    return [str(line) for line in lines]


def find(detector: str, name: str, params: Any = None) -> list[Match]:
    found: Detector[Any] = DETECTORS[detector]
    return run(found, params if params is not None else found.params(), samples(name), [])


# ---------------------------------------------------------------- each on its own run


def test_openmp_after_fork_on_the_stock_replica() -> None:
    [m] = find("openmp-after-fork", "openmp-after-fork")
    assert m.fields == {
        "child": "12783",
        "child_name": "puffer",
        "parent": "12762",
        "team": "2",
        "runtime": "libgomp.so.1.0.0",
    }
    assert m.evidence[0].startswith("pid 12783 (puffer) is a child of pid 12762 (puffer)")
    assert m.evidence[0].endswith("/puffer (fork without exec)")
    assert m.evidence[2] == "pid 12783 was born at t=0.3s, when pid 12762 already had 2 threads"
    assert m.evidence[3] == "pid 12783 tid 12783: ?? ← ?? ← env_start ← train_main"


def test_lock_cycle_of_two_mutexes() -> None:
    [m] = find("lock-cycle", "lock-cycle")
    links = [
        "xfer_a_to_b (tid 11438) waits for mutex 0x55db818ac0e0 held by xfer_b_to_a (tid 11439)",
        "xfer_b_to_a (tid 11439) waits for mutex 0x55db818ac0a0 held by xfer_a_to_b (tid 11438)",
    ]
    assert m.fields == {"pid": "11436", "cycle": "; ".join(links)}
    assert m.evidence == tuple(links)


def test_python_locks_of_two_threads() -> None:
    [m] = find("python-locks", "python-locks")
    assert m.fields == {
        "pid": "12298",
        "threads": "xfer_a_to_b (tid 12301), xfer_b_to_a (tid 12303)",
        "functions": "transfer_a_to_b (py_deadlock.py:15), transfer_b_to_a (py_deadlock.py:23)",
        # each lock with its site, and its owner read from the holder's stack
        "locks": (
            "xfer_a_to_b (tid 12301) waits for account_b in py_deadlock.py (a _thread.lock) at"
            " transfer_a_to_b (py_deadlock.py:15): `with account_b:`, held by xfer_b_to_a"
            " (tid 12303) since py_deadlock.py:20 (read from its stack); xfer_b_to_a (tid 12303)"
            " waits for account_a in py_deadlock.py (a _thread.lock) at transfer_b_to_a"
            " (py_deadlock.py:23): `with account_a:`, held by xfer_a_to_b (tid 12301) since"
            " py_deadlock.py:12 (read from its stack)"
        ),
        "cycle": (
            "a lock-order cycle: xfer_a_to_b (tid 12301) → xfer_b_to_a (tid 12303)"
            " → xfer_a_to_b (tid 12301)"
        ),
    }
    assert m.evidence[0].startswith("tid 12301 xfer_a_to_b: transfer_a_to_b ← Thread.run")


def test_dead_worker_killed_by_sigkill() -> None:
    [m] = find("dead-worker", "dead-worker")
    assert m.fields == {
        "pid": "11586",
        "name": "dead_worker",
        "status": "died by SIGKILL",
        "t": "0.3",
        "parent": "11583",
        "wait": "__GI___libc_read",
    }
    assert m.evidence == (
        "pid 11586 (dead_worker), a child of pid 11583: killed by SIGKILL at t=0.3s",
        "pid 11583 tid 11583: __GI___libc_read ← wait_for_answer ← main ← __libc_start_call_main",
    )


def _with_exit(**change: Any) -> SampleSet:
    """The dead-worker run with its one exit event changed."""
    s = samples("dead-worker")
    exits = [i for i, e in enumerate(s.events) if e.event is EventKind.EXIT]
    assert len(exits) == 1
    s.events[exits[0]] = dataclasses.replace(s.events[exits[0]], **change)
    return s


def test_dead_worker_reads_the_structured_status_not_the_words() -> None:
    found = DETECTORS["dead-worker"]
    # the words say nothing the detector reads: the fields decide
    words = _with_exit(status="gone (see fields)")
    assert run(found, NoParams(), words, [])[0].fields["status"] == "died by SIGKILL"
    exited = _with_exit(signal=None, exit_code=3)
    assert run(found, NoParams(), exited, [])[0].fields["status"] == "exited 3"
    # a clean exit, and a process that vanished without its status seen, are no death
    assert run(found, NoParams(), _with_exit(signal=None, exit_code=0), []) == []
    assert run(found, NoParams(), _with_exit(status_known=False), []) == []


def test_dead_worker_not_when_the_parent_waits_on_its_own_memory() -> None:
    """A child that exited while its parent waits on a private futex (a lock, a condition:
    the wake graph's `private`): the child could never have ended that wait, so its death
    is not why the parent waits (a pytest worker whose earlier test forked a child that
    exited 7, deadlocked later on its own threads' locks, was told dead-worker)."""
    s = samples("dead-worker")
    parent = 11583
    assert [w for w in s.waits if w.pid == parent], "the run's waits are recorded"
    assert run(DETECTORS["dead-worker"], NoParams(), s, [])  # the pipe read: the finding
    s.waits = [
        dataclasses.replace(w, private=True, on="futex:0x1000") if w.pid == parent else w
        for w in s.waits
    ]
    assert run(DETECTORS["dead-worker"], NoParams(), s, []) == []


def test_exit_blocked_on_a_zombie_main() -> None:
    [m] = find("exit-blocked", "exit-blocked")
    assert m.fields == {
        "pid": "11709",
        "where": "exited",
        "threads": "shutdown_wait (tid 11711) in wait_for_shutdown (exit_blocked.c:16)",
    }
    assert m.evidence[0].startswith("tid 11711 shutdown_wait: __futex_abstimed_wait_common64")


def test_spin_on_blocked_workers_on_a_loaded_machine() -> None:
    """The spinning main got 41% of a core (2 shared cores): runnable at every look, it
    counts as spinning all the same."""
    [m] = find("spin-on-blocked-workers", "spin-on-blocked-workers")
    assert m.fields == {
        "pid": "11850",
        "tid": "11850",
        "name": "spin_on_workers",
        "cpu": "41",
        "where": "wait_for_workers (spin_on_workers.c:26)",
        "blocked": "3",
    }
    assert m.evidence[0] == "tid 11850 spin_on_workers: 41% of a core, states RRRR"
    assert len(m.evidence) == 4
    strict = SpinParams(runnable_fraction=1.0)  # a rule's params change what counts
    assert find("spin-on-blocked-workers", "spin-on-blocked-workers", strict) == []


def test_output_on_the_bare_replica() -> None:
    found = DETECTORS["output"]
    [m] = run(found, OutputParams(REGEX), None, tail("missing-dashboard-key"))
    assert m.fields == {
        "section": "?",
        "key": "util/gpu_percent",
        "line": "missing key [?] util/gpu_percent",
    }
    assert m.evidence == ("output: missing key [?] util/gpu_percent",)
    assert run(found, OutputParams(REGEX), None, tail("none-fixed-replica")) == []


def test_frames_on_the_stock_replica() -> None:
    params = FramesParams((re.compile(r"env_start(\._omp_fn\.\d+)?"),))
    [m] = find("frames", "openmp-after-fork", params)
    assert m.fields == {"function": "env_start", "tid": "12783", "pid": "12783"}
    assert m.evidence[0].startswith("pid 12783 tid 12783: ?? ← ?? ← env_start ← train_main")
    assert find("frames", "openmp-after-fork", FramesParams()) == []


# ---------------------------------------------------------------- and nothing elsewhere

# the detectors over samples, with params that would find something on their own run
SAMPLE_DETECTORS = {
    "openmp-after-fork": NoParams(),
    "lock-cycle": NoParams(),
    "python-locks": NoParams(),
    "dead-worker": NoParams(),
    "exit-blocked": NoParams(),
    "spin-on-blocked-workers": SpinParams(),
    "collective-mismatch": NoParams(),
    "missing-rank": NoParams(),
    "mpi-peers-blocked": NoParams(),
    "frames": FramesParams((re.compile(r"env_start(\._omp_fn\.\d+)?"),)),
}
# the run each finds something in (frames: the function the stock replica hangs in)
OWN_RUN = {**{d: d for d in SAMPLE_DETECTORS}, "frames": "openmp-after-fork"}
# tested on their own programs, and over every run here, in test_detectors_python.py
PYTHON_TREE = {"pipe-never-read", "queue-not-drained", "pool-lost-worker", "fork-with-threads"}
RUNS = sorted(p.stem for p in DATA.glob("*.json") if not p.stem.endswith(".output"))


def test_every_detector_is_tested_here() -> None:
    # collective-timeout reads the output (tests/test_detectors_dist.py)
    # wake-chain reads the wake graph's chain: tests/test_detectors_wake.py
    others = {"output", "collective-timeout", "wake-chain"}
    assert set(SAMPLE_DETECTORS) | others | PYTHON_TREE == set(DETECTORS)
    assert {"none-fixed-replica", "none-busy-spin"} <= set(RUNS) and len(RUNS) == 8


@pytest.mark.parametrize("run_name", RUNS)
def test_no_detector_finds_anything_in_another_run(run_name: str) -> None:
    """The fixed replica (cut by the wall while training), a spin with no workers, and each
    other cause's run: no detector claims what is not its shape."""
    found = {
        name: [m.fields for m in run(DETECTORS[name], params, samples(run_name), [])]
        for name, params in SAMPLE_DETECTORS.items()
        if OWN_RUN[name] != run_name
    }
    assert found and all(m == [] for m in found.values()), found


# ---------------------------------------------------------------- the contract


def test_the_dispatcher_skips_a_detector_whose_input_is_absent() -> None:
    for name, params in SAMPLE_DETECTORS.items():
        assert run(DETECTORS[name], params, None, ["output"]) == [], name
    assert run(DETECTORS["output"], OutputParams(REGEX), samples("dead-worker"), []) == []


def test_detectors_declare_their_params_and_fields() -> None:
    declared = {name: describe_params(d.params) for name, d in DETECTORS.items()}
    assert declared == {
        "openmp-after-fork": "no params",
        "lock-cycle": "no params",
        "python-locks": "no params",
        "dead-worker": "no params",
        "exit-blocked": "no params",
        "pipe-never-read": "no params",
        "queue-not-drained": "no params",
        "pool-lost-worker": "no params",
        "fork-with-threads": "no params",
        "collective-mismatch": "no params",
        "missing-rank": "no params",
        "collective-timeout": "no params",
        "mpi-peers-blocked": "no params",
        "spin-on-blocked-workers": "busy_fraction?, runnable_fraction?",
        "output": "regex",
        "frames": "functions?",
        "wake-chain": "ends, via?, some_via?, processes?, departed?, polled?",
    }
    assert DETECTORS["output"].fields_with(OutputParams(REGEX)) == {"line", "section", "key"}


def test_the_shipped_rules_header_lists_exactly_the_detectors() -> None:
    """causes.toml's header names every detector of the registry, and no other."""
    lines = CAUSES_TOML.read_text().splitlines()
    header = "\n".join(
        ln for ln in lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("#"))]
    )
    listed = re.search(r"registry of\n(.*?)Each declares", header, re.DOTALL)
    assert listed is not None
    names = set(re.findall(r"[a-z]+(?:-[a-z]+)+|\b(?:output|frames)\b", listed.group(1)))
    assert names == set(DETECTORS)
    assert "harness/analysis/detectors/" in header
