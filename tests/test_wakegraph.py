"""The wake graph (docs/quiescence.md, "The wake graph"), pure: who could end each wait
(futexes, sockets, locks, eventfds, pidfds, timerfds), the closed set, the chain and where
it ends, the closed set held over looks, the watchdog's `closed` trigger; and the kernel
readers' parsers over hand-made bytes and text. Real programs: tests/test_wakegraph_real.py
and the wake-graph cases of the real-world corpus (tests/realworld)."""

from __future__ import annotations

import functools
import struct

from harness.pipeline import diagnose
from harness.sampling.model import ProcessSample, Snapshot, ThreadSample
from harness.vocab import WakeEnd
from harness.watch import quiescence as q
from harness.watch import wakefacts, wakegraph
from harness.watch.closedwatch import CLOSED_LOOKS, ClosedWatch
from harness.watch.watchdog import CLOSED_CONFIRM_S, Limits, Trigger, Watchdog
from tests import samples

FUTEX, NANOSLEEP, WAIT4, READ, POLL, FLOCK, RECVFROM = 202, 35, 61, 0, 7, 73, 45
PRIVATE_WAIT = 128  # FUTEX_WAIT | FUTEX_PRIVATE_FLAG
SHARED_WAIT = 0  # FUTEX_WAIT, no private flag
Key = tuple[int, int]


# a thread as /proc shows it (asleep in futex(2) by default), seen running once since
th = functools.partial(samples.thread, runs=1)


def running(tid: int) -> ThreadSample:
    return th(tid, state="R", nr="running")


def proc(pid: int, ppid: int, *threads: ThreadSample) -> ProcessSample:
    return ProcessSample(pid, ppid, "prog", "/bin/prog", ["prog"], "sleeping", False, list(threads))


def snap(*procs: ProcessSample, t: float = 0.0) -> Snapshot:
    return Snapshot(t=t, processes=list(procs))


def waits(s: Snapshot, facts: q.TreeFacts | None = None) -> dict[Key, q.Wait]:
    return {(tw.pid, tw.tid): w for tw, w in q.tree_waits(s, q.X86_64, facts or q.TreeFacts())}


def closed(s: Snapshot, facts: q.TreeFacts | None = None) -> frozenset[Key]:
    return wakegraph.closed_set(s, waits(s, facts))


def chain_of(s: Snapshot, facts: q.TreeFacts | None = None, root: int = 10) -> tuple[WakeEnd, str]:
    w = waits(s, facts)
    found = wakegraph.closed_set(s, w)
    start = wakegraph.start_of(s, w, root, found)
    assert start is not None
    c = wakegraph.chain(s, w, start, root, found)
    return c.end, c.text()


# ---------------------------------------------------------------- who could end a wait


def test_a_private_futex_is_woken_only_by_its_own_process() -> None:
    w = waits(snap(proc(10, 1, th(10))))[(10, 10)]
    assert (w.kind, w.wakers, w.resolved) == (q.TREE, (10,), True)


def test_a_shared_futex_needs_the_processes_mapping_it() -> None:
    shared = th(10, args=(0x1000, SHARED_WAIT, 0, 0, 0, 0))
    unresolved = waits(snap(proc(10, 1, shared)))[(10, 10)]
    assert (unresolved.kind, unresolved.resolved) == (q.TREE, False)  # still on the tree
    facts = q.TreeFacts(futex_wakers={(10, 0x1000): (10, 11)})
    w = waits(snap(proc(10, 1, shared), proc(11, 10, running(11))), facts)[(10, 10)]
    assert (w.wakers, w.resolved) == ((10, 11), True)


def test_a_pthread_mutex_is_woken_by_its_owner() -> None:
    facts = q.TreeFacts(owners={(10, 11): (10, 12)})
    w = waits(snap(proc(10, 1, th(11), th(12))), facts)[(10, 11)]
    assert (w.owners, w.resolved) == (((10, 12),), True)
    assert "held by tid 12" in w.what


def test_a_timer_signal_makes_any_wait_timed() -> None:
    facts = q.TreeFacts(signalled={(10, 10): "catches SIGALRM"})
    w = waits(snap(proc(10, 1, th(10))), facts)[(10, 10)]
    assert (w.kind, w.resolved) == (q.TIMED, False)


def test_a_connected_socket_is_ended_by_its_peers_holders() -> None:
    reader = th(10, nr=RECVFROM, args=(3, 0x7FFD, 64, 0, 0, 0))
    facts = q.TreeFacts(fds={(10, 3): "socket:[55]"}, socket_peers={55: [11]})
    s = snap(proc(10, 1, reader), proc(11, 10, th(11)))
    w = waits(s, facts)[(10, 10)]
    assert (w.kind, w.wakers, w.resolved) == (q.TREE, (11,), True)
    outside = waits(s, q.TreeFacts(fds={(10, 3): "socket:[55]"}))[(10, 10)]
    assert outside.kind == q.OUTSIDE  # no proven peer: anyone may write


def test_a_file_lock_is_ended_by_its_holders() -> None:
    locker = th(10, nr=FLOCK, args=(4, 2, 0, 0, 0, 0))
    pending = waits(snap(proc(10, 1, locker)), None)
    assert q.pending_locks(
        [(tw, w) for tw, w in q.tree_waits(snap(proc(10, 1, locker)), q.X86_64)]
    ) == [(10, 4)]
    assert pending[(10, 10)].kind in (q.OUTSIDE, q.UNKNOWN)
    facts = q.TreeFacts(
        fds={(10, 4): "/tmp/x.lock"},
        fd_wakers={(10, 4): (11,)},
        fd_what={(10, 4): "lock on /tmp/x.lock, held by pid 11"},
    )
    w = waits(snap(proc(10, 1, locker), proc(11, 10, th(11))), facts)[(10, 10)]
    assert (w.kind, w.wakers) == (q.TREE, (11,))
    assert "held by pid 11" in w.what
    held_outside = q.TreeFacts(fds={(10, 4): "/tmp/x.lock"}, fd_what={(10, 4): "lock …"})
    assert waits(snap(proc(10, 1, locker)), held_outside)[(10, 10)].kind == q.OUTSIDE


def test_a_poll_on_an_eventfd_and_timerfds() -> None:
    poller = th(10, nr=POLL, args=(0x7FFD, 2, 0xFFFFFFFF, 0, 0, 0))  # no timeout
    base = {
        "fds": {(10, 5): "anon_inode:[eventfd]", (10, 6): "anon_inode:[timerfd]"},
        "polled": {(10, 10): [(5, 1), (6, 1)]},
        "fd_wakers": {(10, 5): (10, 11)},
    }
    s = snap(proc(10, 1, poller), proc(11, 10, th(11)))
    disarmed = waits(s, q.TreeFacts(**base, timerfds={(10, 6): False}))[(10, 10)]  # type: ignore[arg-type]
    assert (disarmed.kind, disarmed.wakers) == (q.TREE, (10, 11))  # a disarmed timer wakes nobody
    armed = waits(s, q.TreeFacts(**base, timerfds={(10, 6): True}))[(10, 10)]  # type: ignore[arg-type]
    assert (armed.kind, armed.resolved) == (q.TIMED, False)


# ---------------------------------------------------------------- the closed set


def test_the_only_thread_on_a_private_futex_is_closed_and_ends_at_nobody() -> None:
    s = snap(proc(10, 1, th(10)))
    assert closed(s) == {(10, 10)}
    end, text = chain_of(s)
    assert end is WakeEnd.NOBODY, text


def test_a_futex_waiter_beside_a_running_thread_is_not_closed() -> None:
    s = snap(proc(10, 1, th(10), running(11)))
    assert closed(s) == frozenset()
    assert chain_of(s)[0] is WakeEnd.RUNNING


def test_a_futex_waiter_beside_a_sleeping_thread_ends_at_the_timer() -> None:
    s = snap(proc(10, 1, th(10), th(11, nr=NANOSLEEP, args=(0x7FFD, 0, 0, 0, 0, 0))))
    assert closed(s) == frozenset()
    assert chain_of(s)[0] is WakeEnd.TIMED


def test_a_mutex_cycle_is_closed_while_a_third_thread_runs() -> None:
    facts = q.TreeFacts(owners={(10, 11): (10, 12), (10, 12): (10, 11)})
    s = snap(proc(10, 1, running(10), th(11), th(12)))
    assert closed(s, facts) == {(10, 11), (10, 12)}
    end, text = chain_of(s, facts)
    assert end is WakeEnd.CYCLE and "tid 11" in text and "tid 12" in text


def test_a_mutex_whose_owner_exited_ends_at_a_dead_thread() -> None:
    facts = q.TreeFacts(owners={(10, 11): (10, 99)})
    s = snap(proc(10, 1, running(10), th(11)))
    assert closed(s, facts) == {(10, 11)}
    end, text = chain_of(s, facts)
    assert end is WakeEnd.DEAD and "99" in text


def test_a_parent_waiting_for_a_deadlocked_child_is_closed_with_it() -> None:
    parent = th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0))
    s = snap(proc(10, 1, parent), proc(11, 10, th(11)))
    assert closed(s) == {(10, 10), (11, 11)}
    end, text = chain_of(s)
    assert end is WakeEnd.NOBODY and text.index("pid 10") < text.index("pid 11")


def test_a_child_deadlocked_beside_a_parent_that_polls_is_closed_alone() -> None:
    """The partial deadlock: the parent goes on (a timed loop), the child never will."""
    parent = th(10, nr=NANOSLEEP, args=(0x7FFD, 0, 0, 0, 0, 0))
    s = snap(proc(10, 1, parent, running(12)), proc(11, 10, th(11)))
    assert closed(s) == {(11, 11)}
    w = waits(s)
    start = wakegraph.start_of(s, w, 10, closed(s))
    assert start == (11, 11)  # the set's thread, not the root that runs


def test_a_pipe_reader_whose_writer_computes_is_not_closed() -> None:
    reader = th(11, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    facts = q.TreeFacts(fds={(11, 3): "pipe:[7]"}, writers={7: [10]})
    s = snap(proc(10, 1, running(10)), proc(11, 10, reader))
    assert closed(s, facts) == frozenset()
    end, _ = chain_of(s, facts, root=11)
    assert end is WakeEnd.RUNNING


def test_an_idle_server_in_accept_is_outside() -> None:
    server = th(10, nr=43, args=(3, 0, 0, 0, 0, 0))  # accept
    s = snap(proc(10, 1, server))
    assert closed(s) == frozenset()
    assert chain_of(s)[0] is WakeEnd.OUTSIDE


def test_a_stopped_child_ends_the_chain() -> None:
    parent = th(10, nr=WAIT4, args=(11, 0x7FFD, 0, 0, 0, 0))
    s = snap(proc(10, 1, parent), proc(11, 10, th(11, state="T", nr="running")))
    assert closed(s) == frozenset()
    assert chain_of(s)[0] is WakeEnd.STOPPED


def test_a_wait_whose_other_threads_died_ends_at_a_dead_thread() -> None:
    s = snap(proc(10, 1, th(10)))
    w = waits(s)
    c = wakegraph.chain(s, w, (10, 10), 10, closed(s), gone={10: [12]})
    assert c.end is WakeEnd.DEAD and "tid 12" in c.end_what


def test_an_orphan_of_the_run_is_noted_on_its_link() -> None:
    reader = th(10, nr=READ, args=(3, 0x7FFD, 64, 0, 0, 0))
    facts = q.TreeFacts(fds={(10, 3): "pipe:[7]"}, writers={7: [20]})
    s = snap(proc(10, 1, reader), proc(20, 999, th(20)))  # 999: its parent left
    c = wakegraph.chain(s, waits(s, facts), (10, 10), 10, closed(s, facts))
    assert "no longer in its tree" in c.links[1].note


# ---------------------------------------------------------------- over looks, the trigger


def test_a_closed_set_must_hold_over_looks_unchanged() -> None:
    watch = ClosedWatch()
    members = frozenset({(10, 10)})
    for i in range(CLOSED_LOOKS):
        watch.look(snap(proc(10, 1, th(10)), t=i * 0.25), members)
        assert watch.ready_since() is None
    watch.look(snap(proc(10, 1, th(10)), t=CLOSED_LOOKS * 0.25), members)
    assert watch.ready_since() == 0.0
    watch.look(snap(proc(10, 1, th(10, runs=2)), t=2.0), members)  # it was scheduled
    assert watch.ready_since() is None and watch.since == 2.0
    watch.look(snap(proc(10, 1, th(10, runs=2)), t=2.25), frozenset())
    assert watch.since is None


def test_the_watchdog_fires_closed_after_the_confirmation() -> None:
    dog = Watchdog(Limits(startup_s=60, stall_s=60, wall_s=100, quiescent_s=5), 0.0)
    dog.closed(1.0, "2 threads of pid 10")
    assert dog.check(1.0 + CLOSED_CONFIRM_S - 0.01) is None
    assert dog.check(1.0 + CLOSED_CONFIRM_S) is Trigger.CLOSED
    assert "2 threads of pid 10" in dog.reason(Trigger.CLOSED, 2.5)
    off = Watchdog(Limits(startup_s=60, stall_s=60, wall_s=100, quiescent_s=0), 0.0)
    off.closed(1.0)
    assert off.check(5.0) is None  # --quiescent 0 turns the early verdicts off


# ---------------------------------------------------------------- the kernel's answers


def _nl(kind: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 1, 0) + body


def _attr(kind: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def test_sock_diag_messages_are_parsed() -> None:
    msg = struct.pack("=BBBBIII", 1, 1, 1, 0, 100, 0, 0) + _attr(2, struct.pack("=I", 101))
    named = struct.pack("=BBBBIII", 1, 2, 7, 0, 200, 0, 0) + _attr(0, b"/tmp/s\0")
    found, done = wakefacts.parse_unix_diag(_nl(20, msg) + _nl(20, named) + _nl(3, b"\0" * 4))
    assert done
    assert found[100] == wakefacts.UnixSocket(100, 1, 1, 101, False)
    assert found[200].named and found[200].peer == 0
    cut, done = wakefacts.parse_unix_diag(_nl(20, msg)[:-3])  # damaged: stops, no raise
    assert done and cut == {}


def test_proc_locks_lines_are_parsed() -> None:
    text = (
        "1: FLOCK  ADVISORY  WRITE 3834 fe:00:2146849 0 EOF\n"
        "1: -> FLOCK  ADVISORY  WRITE 3900 fe:00:2146849 0 EOF\n"
        "2: POSIX  ADVISORY  READ 12 00:1f:77 0 EOF\n"
        "garbage\n"
    )
    locks = wakefacts.parse_locks(text)
    assert [(lk.kind, lk.pid, lk.inode, lk.blocked) for lk in locks] == [
        ("FLOCK", 3834, 2146849, False),
        ("FLOCK", 3900, 2146849, True),
        ("POSIX", 12, 77, False),
    ]
    assert locks[0].dev == "fe:00"


def test_a_thread_that_died_is_read_from_the_output() -> None:
    tail = [
        "Exception in thread Thread-1 (produce):",
        "Traceback (most recent call last):",
        '  File "/x.py", line 3, in produce',
        "ValueError: bad row 7",
        "working...",
    ]
    assert diagnose.thread_died(tail) == "Thread-1 (produce): ValueError: bad row 7"
    assert diagnose.thread_died(["Exception in thread: nothing", "ok"]) == ""
    cut = ["Exception in thread tile 1 rendered", "tile 2 rendered", "enqueuer:", *tail[1:]]
    assert diagnose.thread_died(cut) == "enqueuer: ValueError: bad row 7"  # lines cut in
    # another thread's line first, then excepthook's "Exception in thread " alone (its
    # trailing space stripped): the name comes lines later (wg-dead-worker-queue, loaded)
    split = ["tile 1 renderedException in thread ", "enqueuer:", tail[1], "tile 2 rendered"]
    assert diagnose.thread_died([*split, *tail[2:]]) == "enqueuer: ValueError: bad row 7"
