"""The plugin's view of its own process's threads: which are infrastructure, left out of
the quiescence rule (pytest-timeout's Timer, threads not started through `threading`), and
how the process ends when a hung test it interrupted left deadlocked threads behind."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Collection

from harness.pytest_plugin import procstart
from harness.pytest_plugin.pinned import P

# plugins whose threads are the session's infrastructure, never the test's
INFRA_MODULES = frozenset({"pytest_timeout", "pytest_rerunfailures"})


def timer_threads() -> list[int]:
    """Threads of other pytest plugins that wait for the whole session or test, outside the
    tree, so the tree would never be quiescent while they live; infrastructure, left out of
    the rule: pytest-timeout's Timer (its thread method: the watchdog, not the test) and
    pytest-rerunfailures' status server (started whenever xdist is installed, even without
    -n: a thread in accept() for the whole session)."""
    out = []
    for t in P.enumerate():
        fn = t.function if isinstance(t, P.timer_class) else getattr(t, "_target", None)
        if getattr(fn, "__module__", "") in INFRA_MODULES and t.native_id is not None:
            out.append(t.native_id)
    return out


def foreign_threads() -> list[int]:
    """Threads of this process not started through `threading`: xdist's execnet receiver
    (blocked reading the controller's pipe), faulthandler's watchdog (pytest's
    `faulthandler_timeout` starts a new one for each test, waiting with a timeout).
    Infrastructure, not the test's; listed again at each phase, since their tids change.
    The watcher leaves one out of the rule only while it is blocked: one that runs may be
    doing the test's work (and a new one runs for a moment before it waits)."""
    known = {t.native_id for t in P.enumerate()}
    me = P.getpid()
    try:
        tids = [int(name) for name in P.listdir(f"/proc/{me}/task") if name.isdigit()]
    except OSError:
        return []
    return [tid for tid in tids if tid not in known and tid != me]


def started_since(since: float) -> set[int]:
    """Native ids of this process's threads (the main one excepted) started at or after
    `since` (a `procstart.now()`): the threads of a phase that hung."""
    me = P.getpid()
    return {tid for tid in procstart.threads_since(me, since) if tid != me}


def end_if_threads_left(
    left: Collection[int], exitstatus: int, grace_s: float, note: Callable[[str], None]
) -> None:
    """Threads a hung test started (`left`, native ids recorded when it was interrupted)
    that are deadlocked would make Python's exit join them for ever (a non-daemon thread;
    an executor's worker, joined at shutdown). Give them `grace_s`, then run the atexit
    handlers (coverage data, logging), flush and end without the join, saying so. Any
    other thread is not ours to judge: Python's exit waits for it as usual."""
    if not left:
        return
    end = P.monotonic() + grace_s
    stuck = [
        t
        for t in P.enumerate()
        if t.native_id in left and t is not threading.main_thread() and not t.daemon
    ]
    for t in stuck:
        t.join(max(0.0, end - P.monotonic()))
    alive = [t.name for t in stuck if t.is_alive()]
    if not alive:
        return
    note(
        f"hang-watch: {len(alive)} thread(s) of a hung test still running at the end "
        f"({', '.join(alive[:5])}): pytest ends without waiting for them"
    )
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(exitstatus)
