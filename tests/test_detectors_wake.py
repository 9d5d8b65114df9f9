"""The wake graph's readings (docs/quiescence.md, "Causes from the graph"): what each wait is
(`via`), and the shipped rules of data/causes/wake.toml over chains made by the real rule
(quiescence → wakegraph) from hand-made snapshots and facts, through `analysis.causes`
exactly as a run diagnoses: the fallback order, a named cause first, no reading where the
chain explains nothing more. Real programs: the wg-* cases of tests/realworld (cases.toml
names the reading each must get)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.analysis import causes
from harness.analysis.detectors import DETECTORS, run
from harness.analysis.detectors.wake import WakeParams, counted
from harness.config.causes import rule_from_table
from harness.errors import HarnessError
from harness.outcome import Kind
from harness.sampling.model import SampleSet, Snapshot, WakeChain, WakeLink
from harness.vocab import Mechanism, WaitVia, WakeEnd
from harness.watch import fdwaits, wakegraph
from harness.watch import quiescence as q
from tests.samples import sample_set
from tests.test_wakegraph import (
    FLOCK,
    POLL,
    READ,
    RECVFROM,
    WAIT4,
    closed,
    proc,
    running,
    snap,
    th,
    waits,
)

WRITE = 1


def chain(s: Snapshot, facts: q.TreeFacts | None = None, root: int = 10) -> WakeChain:
    w = waits(s, facts)
    found = wakegraph.closed_set(s, w)
    start = wakegraph.start_of(s, w, root, found)
    assert start is not None
    return wakegraph.chain(s, w, start, root, found)


def samples_with(wake: WakeChain | None) -> SampleSet:
    return sample_set(wake=wake)


def read(wake: WakeChain | None, mechanism: Mechanism = Mechanism.DEADLOCK) -> list[str]:
    """The shipped rules over a hang whose only evidence is this chain: the cause ids."""
    facts = causes.Facts(Kind.HANG, mechanism, "somewhere", samples_with(wake), [])
    return [c.id for c in causes.diagnose(facts, causes.checked_rules())]


def sentence(wake: WakeChain) -> str:
    facts = causes.Facts(Kind.HANG, Mechanism.DEADLOCK, "x", samples_with(wake), [])
    return causes.diagnose(facts, causes.checked_rules())[0].sentence


# ---------------------------------------------------------------- what each wait is


def test_what_an_fd_is_from_its_readlink() -> None:
    assert fdwaits.target_via("pipe:[7]") is WaitVia.PIPE
    assert fdwaits.target_via("socket:[8]") is WaitVia.SOCKET
    assert fdwaits.target_via("anon_inode:[eventfd]") is WaitVia.EVENTFD
    assert fdwaits.target_via("anon_inode:[pidfd]") is WaitVia.EXIT
    assert fdwaits.target_via("/run/x.fifo") is WaitVia.FILE
    assert fdwaits.target_via("anon_inode:[io_uring]") is WaitVia.OTHER


def test_each_wait_says_what_it_waits_on() -> None:
    facts = q.TreeFacts(
        fds={(11, 3): "pipe:[7]", (12, 4): "/tmp/x.lock", (13, 5): "socket:[9]"},
        writers={7: [10]},
        fd_wakers={(12, 4): (10,)},
        socket_peers={9: [10]},
        owners={(10, 15): (10, 16)},
    )
    s = snap(
        proc(10, 1, th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0)), th(15), th(16)),
        proc(11, 10, th(11, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))),
        proc(12, 10, th(12, nr=FLOCK, args=(4, 2, 0, 0, 0, 0))),
        proc(13, 10, th(13, nr=RECVFROM, args=(5, 0x7FFD, 64, 0, 0, 0))),
    )
    got = {k: w.via for k, w in waits(s, facts).items()}
    assert got == {
        (10, 10): WaitVia.EXIT,
        (10, 15): WaitVia.MUTEX,  # an owner read from memory
        (10, 16): WaitVia.FUTEX,
        (11, 11): WaitVia.PIPE,
        (12, 12): WaitVia.FILE_LOCK,  # the call says more than the fd (a plain file)
        (13, 13): WaitVia.SOCKET,
    }


def test_a_poll_is_its_fds_kind_or_poll_when_they_differ() -> None:
    poller = th(10, nr=POLL, args=(0x7FFD, 2, 0xFFFFFFFF, 0, 0, 0))
    fds = {(10, 5): "socket:[55]", (10, 6): "pipe:[7]"}
    facts = q.TreeFacts(fds=fds, socket_peers={55: [11]}, writers={7: [11]})
    s = snap(proc(10, 1, poller), proc(11, 10, th(11)))
    both = dataclasses.replace(facts, polled={(10, 10): [(5, 1), (6, 1)]})
    assert waits(s, both)[(10, 10)].via is WaitVia.POLL
    one = dataclasses.replace(facts, polled={(10, 10): [(5, 1)]})
    assert waits(s, one)[(10, 10)].via is WaitVia.SOCKET


# ---------------------------------------------------------------- each reading


def test_two_processes_that_both_read_first_are_an_ipc_cycle() -> None:
    """multiprocessing.Pipe's two ends (a socketpair), each worker in recv; the parent
    polls with a timeout (a partial deadlock: it is not on the cycle)."""
    facts = q.TreeFacts(
        fds={(11, 3): "socket:[50]", (12, 3): "socket:[51]"},
        socket_peers={50: [12], 51: [11]},
    )
    s = snap(
        proc(10, 1, th(10, nr=35, args=(0x7FFD, 0, 0, 0, 0, 0))),  # nanosleep: it polls
        proc(11, 10, th(11, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))),
        proc(12, 10, th(12, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))),
    )
    wake = chain(s, facts)
    assert wake.end is WakeEnd.CYCLE and [k.via for k in counted(wake)] == [WaitVia.SOCKET] * 2
    assert read(wake) == ["ipc-cycle"]
    told = sentence(wake)
    assert told.startswith("pids 11, 12 wait for each other over sockets: pid 11 tid 11")


def test_a_parent_waiting_for_a_child_that_writes_its_pipe_is_an_ipc_cycle() -> None:
    """The shape of Popen.wait() with stdout=PIPE: the wait for the exit and the full pipe
    (pipe-never-read names it for Python; the graph alone reads it for any program)."""
    facts = q.TreeFacts(fds={(11, 1): "pipe:[7]"}, readers={7: [10]})
    s = snap(
        proc(10, 1, th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0))),
        proc(11, 10, th(11, nr=WRITE, args=(1, 0x7FFD, 65536, 0, 0, 0))),
    )
    wake = chain(s, facts)
    assert [k.via for k in counted(wake)] == [WaitVia.EXIT, WaitVia.PIPE]
    assert read(wake) == ["ipc-cycle"]


def test_two_processes_each_holding_the_others_file_lock() -> None:
    locker = th(11, nr=FLOCK, args=(4, 2, 0, 0, 0, 0))
    other = th(12, nr=FLOCK, args=(4, 2, 0, 0, 0, 0))
    facts = q.TreeFacts(
        fds={(11, 4): "/tmp/b.lock", (12, 4): "/tmp/a.lock"},
        fd_wakers={(11, 4): (12,), (12, 4): (11,)},
        fd_what={(11, 4): "lock on /tmp/b.lock, held by pid 12", (12, 4): "lock on /tmp/a…"},
    )
    parent = th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0))
    s = snap(proc(10, 1, parent), proc(11, 10, locker), proc(12, 10, other))
    wake = chain(s, facts)
    # the parent joins the first locker: on the chain, not in the cycle
    assert [k.pid for k in wake.links] == [10, 11, 12]
    assert [k.pid for k in counted(wake)] == [11, 12]
    assert read(wake) == ["file-lock-cycle"]
    assert "file-lock deadlock among pids 11, 12" in sentence(wake)


def test_a_mutex_cycle_and_a_futex_cycle() -> None:
    facts = q.TreeFacts(owners={(10, 11): (10, 12), (10, 12): (10, 11)})
    s = snap(proc(10, 1, running(10), th(11), th(12)))
    assert read(chain(s, facts)) == ["mutex-cycle"]
    # the same cycle with one wait on a futex with no owner read (a condition): futex-cycle
    futexes = WakeChain(
        [
            WakeLink(10, 11, "a", "futex wait", via=WaitVia.MUTEX),
            WakeLink(10, 12, "b", "futex wait", via=WaitVia.FUTEX),
        ],
        WakeEnd.CYCLE,
        "back",
        10,
        11,
    )
    assert read(futexes) == ["futex-cycle"]


def test_a_resource_held_by_a_process_that_left_the_tree() -> None:
    reader = th(10, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    facts = q.TreeFacts(fds={(10, 3): "pipe:[7]"}, writers={7: [20]})
    s = snap(proc(10, 1, reader), proc(20, 999, th(20)))  # 999: its parent left
    wake = wakegraph.chain(s, waits(s, facts), (10, 10), 10, closed(s, facts))
    assert wake.end is WakeEnd.NOBODY
    assert read(wake) == ["held-by-departed"]  # before no-waker: the more telling reading
    told = sentence(wake)
    assert told.startswith("pid 10 tid 10 (t10) waits (read on pipe 7") and "pid 20" in told


def test_a_dead_waker_nobody_and_a_polling_loop() -> None:
    alone = snap(proc(10, 1, th(10)))
    nobody = chain(alone)
    assert read(nobody) == ["no-waker"]
    dead = wakegraph.chain(alone, waits(alone), (10, 10), 10, closed(alone), gone={10: [12]})
    assert read(dead) == ["dead-waker"]
    timed = WakeChain([], WakeEnd.TIMED, "nanosleep: it wakes by itself", 10, 10)
    assert read(timed, Mechanism.IDLE) == []  # a sleeper: nothing says it polls
    # the words alone are no trace: only what attrigger.trace_polling found counts
    said = dataclasses.replace(timed, end_what=f"{timed.end_what}; a loop that polls")
    assert read(said, Mechanism.IDLE) == []
    polled = dataclasses.replace(timed, polled="polls /tmp/x.lock (openat → EEXIST) 19 times")
    assert read(polled, Mechanism.IDLE) == ["polling-loop"]


@pytest.mark.parametrize(
    "end", [WakeEnd.OUTSIDE, WakeEnd.RUNNING, WakeEnd.STOPPED, WakeEnd.UNKNOWN]
)
def test_a_chain_that_ends_elsewhere_has_no_reading(end: WakeEnd) -> None:
    """An idle server in accept, a busy worker, a stopped child: the chain is the whole
    explanation, no cause is claimed."""
    link = WakeLink(10, 10, "main", "wait4 for child 11", via=WaitVia.EXIT)
    assert read(WakeChain([link], end, "…", 11, 11)) == []
    assert read(None) == []


# ---------------------------------------------------------------- fallbacks


def test_a_named_cause_comes_before_any_reading_of_the_graph() -> None:
    """The graph reads a cycle, but a named rule also finds the hang: the named one alone
    (it knows the library and its remedies), as the corpus asks (one cause per finding)."""
    named = rule_from_table(
        {
            "id": "own",
            "detector": "output",
            "kinds": ["hang"],
            "sentence": "the program said {line}",
            "params": {"regex": "stuck"},
        },
        "pin.toml",
    )
    rules = [causes.check(named), *causes.checked_rules()]
    facts = q.TreeFacts(owners={(10, 11): (10, 12), (10, 12): (10, 11)})
    wake = chain(snap(proc(10, 1, th(11), th(12))), facts)
    seen = causes.Facts(Kind.HANG, Mechanism.DEADLOCK, "x", samples_with(wake), ["stuck"])
    assert [c.id for c in causes.diagnose(seen, rules)] == ["own"]
    unnamed = dataclasses.replace(seen, output_tail=["fine"])
    assert [c.id for c in causes.diagnose(unnamed, rules)] == ["mutex-cycle"]


def test_params_are_words_of_the_vocabulary() -> None:
    table = {"id": "r", "detector": "wake-chain", "kinds": ["hang"], "sentence": "{steps}"}
    ok = causes.check(rule_from_table({**table, "params": {"ends": ["cycle"]}}, "pin.toml"))
    assert ok.params == WakeParams(ends=(WakeEnd.CYCLE,))
    with pytest.raises(HarnessError) as bad:
        causes.check(rule_from_table({**table, "params": {"ends": ["loop"]}}, "pin.toml"))
    assert "params.ends[0] must be one of cycle, nobody, dead" in bad.value.message
    assert "\n" not in bad.value.message
    with pytest.raises(HarnessError) as missing:
        causes.check(rule_from_table({**table, "params": {}}, "pin.toml"))
    assert "detector wake-chain needs params.ends" in missing.value.message


def test_the_detector_matches_once_per_chain() -> None:
    link = WakeLink(10, 10, "main", "futex wait", via=WaitVia.FUTEX)
    wake = WakeChain([link], WakeEnd.NOBODY, "nobody", 10, 10)
    found = run(DETECTORS["wake-chain"], WakeParams(ends=(WakeEnd.NOBODY,)), samples_with(wake), [])
    assert len(found) == 1 and found[0].fields["waiter"] == "pid 10 tid 10 (main)"
    more = WakeParams(ends=(WakeEnd.NOBODY,), processes=2)
    assert run(DETECTORS["wake-chain"], more, samples_with(wake), []) == []


def test_a_deadlock_inside_a_departed_process_is_not_what_it_holds() -> None:
    """The chain starts in the process that left the tree (its own threads deadlock; the
    run's root only sleeps): that process is what hangs, nothing of the run waits on what
    it holds, so the mutex cycle is the reading, not held-by-departed."""
    note = "started by the run, no longer in its tree (an orphan or a daemon)"
    cycle = WakeChain(
        [
            WakeLink(20, 20, "d", "futex wait", wakers=[20], note=note, via=WaitVia.MUTEX),
            WakeLink(20, 21, "d", "futex wait", wakers=[20], note=note, via=WaitVia.MUTEX),
        ],
        WakeEnd.CYCLE,
        "back",
        20,
        20,
    )
    assert read(cycle) == ["mutex-cycle"]
