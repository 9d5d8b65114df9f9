"""Start times of processes and threads on one clock, the plugin's and the watcher's:
seconds since boot. /proc/PID/stat's starttime counts clock ticks since boot; psutil's
`create_time()` adds it to a boot time kept in whole seconds, which is early by up to a
second against `time.time()`: a child born in the first part of a hung phase would look
older than the phase (and be left running). `time.clock_gettime(CLOCK_BOOTTIME)` is the
kernel's clock for starttime itself, so the only error left is one tick (`TICK_S`).
Every call goes through `pinned` (this runs inside pytest's process, where a test may have
replaced `open` or `time.clock_gettime`)."""

from __future__ import annotations

import contextlib
import os
import time

from harness.pytest_plugin.pinned import P, read_small

try:
    TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
except (OSError, ValueError):  # pragma: no cover (Linux always has it)
    TICK_S = 0.01


def now() -> float:
    """Seconds since boot, the clock of /proc's starttime."""
    return P.clock_gettime(time.CLOCK_BOOTTIME)


def stat_fields(path: str) -> list[str] | None:
    """The fields of a stat file after the command name (which may hold spaces and ")")."""
    data = read_small(path)
    if data is None:
        return None
    text = data.decode(errors="replace")
    try:
        return text[text.rindex(")") + 2 :].split()
    except ValueError:
        return None


def _started(fields: list[str] | None) -> float | None:
    if fields is None or len(fields) < 20:
        return None
    with contextlib.suppress(ValueError):
        return int(fields[19]) * TICK_S  # field 22 of stat, the 20th after the name
    return None


def process_started(pid: int) -> float | None:
    """When `pid` started, seconds since boot (None when it is gone)."""
    return _started(stat_fields(f"/proc/{pid}/stat"))


def born_since(started: float | None, since: float) -> bool:
    """Whether a start time read from /proc is at or after `since` (a `now()`): starttime
    is truncated to the tick, so one tick of slack."""
    return started is not None and started >= since - TICK_S


# state letters of a thread that is not running: sleeping, disk wait, stopped, traced
BLOCKED = frozenset("SDtT")


def blocked(pid: int, tid: int) -> bool:
    """Whether thread `tid` of `pid` is there and not running."""
    fields = stat_fields(f"/proc/{pid}/task/{tid}/stat")
    return fields is not None and len(fields) > 0 and fields[0] in BLOCKED


def threads(pid: int) -> dict[int, tuple[float | None, str]]:
    """Each thread of `pid`: its start (seconds since boot) and its state letter."""
    try:
        tids = P.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    out: dict[int, tuple[float | None, str]] = {}
    for name in tids:
        if not name.isdigit():
            continue
        fields = stat_fields(f"/proc/{pid}/task/{name}/stat")
        if fields:
            out[int(name)] = (_started(fields), fields[0])
    return out


def threads_since(pid: int, since: float) -> list[int]:
    """Threads of `pid` started at or after `since` (a `now()`)."""
    return [tid for tid, (started, _) in threads(pid).items() if born_since(started, since)]
