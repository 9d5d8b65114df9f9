"""Going on after a test hung where it cannot be interrupted, without pytest-xdist: pytest is
started again in the same process (`os.execve`, same pid: the parent that waits for pytest
still waits for it), from the folder it was started in, with the environment it was started
with, plus `HANG_WATCH_RESUME=JOURNAL` (an environment variable, not an option: an option
after a `--` would be a file argument).

The journal is written as the session goes: a header line, then each report of the session
as it is logged (`pytest_report_to_serializable`, one JSON line, one write on a descriptor of
the plugin's own), then, once a test hung, the verdict on it (`hung`). It is on disk before
anything can hang, so a main thread stuck in native code with the GIL held (nothing of
Python runs in pytest then) loses nothing: the watcher appends the verdict and makes the
process start again through gdb (`traced_exec`). The resumed session replays each saved test
in its place in the run order (`replay`: logstart, its reports, logfinish; the test is not
run again), the hung one as a failure with the verdict, so the terminal, the summary counts,
JUnit and the exit status hold every test, and runs the others."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin import channel
from harness.pytest_plugin.pinned import ORIG_ARGV, P, write_all

ENV = channel.RESUME_ENV
MAX_STATE = 256 * 1024 * 1024
HEADER = "hang-watch-journal"


class Journal:
    """The session's reports on disk, a line each, as they are logged. A write that fails (a
    full disk, a descriptor a test closed) stops it: `broken` says why, once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.broken = ""
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
        self.fd = P.os_open(str(path), flags, 0o600)
        self.ino = P.fstat(self.fd).st_ino
        self._line({"t": HEADER, "pid": P.getpid()})

    def _line(self, data: dict[str, Any]) -> None:
        if self.broken:
            return
        try:
            same = P.fstat(self.fd).st_ino == self.ino  # a test may have closed it and
        except OSError:  # opened a file of its own under the same number
            same = False
        if not same:
            self.broken = "its descriptor was closed by a test"
            return
        text = P.dumps(data, default=str) + "\n"  # a user property may be a Path
        if not write_all(self.fd, text.encode()):
            self.broken = "a write failed (a full disk?)"

    def add(self, config: pytest.Config, report: pytest.TestReport) -> None:
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        if isinstance(data, dict):
            self._line({"t": "report", "loc": list(report.location), "data": data})

    def add_hung(self, hang: channel.Hang) -> None:
        self._line({"t": "hung", **hang.to_json()})

    def close(self, remove: bool) -> None:
        with contextlib.suppress(OSError):
            P.close(self.fd)
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


@dataclass
class State:
    """Reports by node id, in the order they were logged; `hung` are the tests that were
    ended where they could not be interrupted (the header names them; replay fails them)."""

    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    locations: dict[str, list[Any]] = field(default_factory=dict)
    hung: list[dict[str, Any]] = field(default_factory=list)

    def hang_of(self, nodeid: str) -> channel.Hang | None:
        for data in self.hung:
            hang = channel.Hang.from_json(data)
            if hang is not None and hang.nodeid == nodeid:
                return hang
        return None


def load(path: Path) -> State:
    """The state a hung session left (removed once read: it is this session's alone). A
    last line cut short (the process was killed mid-write) is left out."""
    try:
        with P.open(path, "rb") as f:
            lines = f.read(MAX_STATE).splitlines()
    except OSError as exc:
        raise pytest.UsageError(f"{ENV}={path}: cannot be read ({exc})") from None
    with contextlib.suppress(OSError):
        os.unlink(path)
    try:
        head = P.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("t") != HEADER:
        raise pytest.UsageError(f"{ENV}={path}: not a hang-watch journal")
    state = State()
    for line in lines[1:]:
        try:
            item = P.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if item.get("t") == "report" and isinstance(item.get("data"), dict):
            nodeid = str(item["data"].get("nodeid", ""))
            state.reports.setdefault(nodeid, []).append(item["data"])
            loc = item.get("loc")
            state.locations.setdefault(nodeid, list(loc) if isinstance(loc, list) else [])
        elif item.get("t") == "hung" and channel.Hang.from_json(item) is not None:
            state.hung.append(item)
    return state


def header(state: State) -> list[str]:
    """The resumed session's header lines: the tests it was started again after."""
    lines = []
    for data in state.hung:
        hang = channel.Hang.from_json(data)
        if hang is not None:
            how = " (the GIL held: through gdb)" if hang.answer == channel.EXEC_TRACED else ""
            lines.append(
                f"hang-watch: resumed after {hang.nodeid} hung in native code{how} "
                f"(report {hang.report}); the tests before it are replayed"
            )
    return lines


def hung_reports(hang: channel.Hang, location: tuple[str, int | None, str]) -> list[Any]:
    """The hung phase failed with the verdict; a setup or call that hung is followed by a
    teardown that did not run (passed, as JUnit and the terminal need one to close the
    test)."""
    started = hang.time - hang.after_s
    failed = pytest.TestReport(
        nodeid=hang.nodeid,
        location=location,
        keywords={},
        outcome="failed",
        longrepr=hang.message,
        when=hang.when,  # type: ignore[arg-type]
        duration=max(0.0, hang.after_s),
        start=started,
        stop=hang.time,
    )
    out = [failed]
    if hang.when != "teardown":
        out.append(
            pytest.TestReport(
                nodeid=hang.nodeid,
                location=location,
                keywords={},
                outcome="passed",
                longrepr=None,
                when="teardown",
                start=hang.time,
                stop=hang.time,
            )
        )
    return out


def replay(
    config: pytest.Config, nodeid: str, state: State, where: tuple[Any, ...] | None = None
) -> bool:
    """Log the saved reports of `nodeid` as if it ran now, and the hung test's failure
    (at `where`, the collected item's location, when known); False when there are none
    (the test runs)."""
    hang = state.hang_of(nodeid)
    saved = state.reports.pop(nodeid, None)
    if saved is None and hang is None:
        return False
    location = where or tuple(state.locations.get(nodeid) or [nodeid, None, nodeid])
    config.hook.pytest_runtest_logstart(nodeid=nodeid, location=location)
    for data in saved or []:
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        if report is not None:
            config.hook.pytest_runtest_logreport(report=report)
    if hang is not None:
        state.hung = [h for h in state.hung if h.get("nodeid") != nodeid]
        for report in hung_reports(hang, location):
            config.hook.pytest_runtest_logreport(report=report)
    config.hook.pytest_runtest_logfinish(nodeid=nodeid, location=location)
    return True


def replay_rest(config: pytest.Config, state: State) -> None:
    """Saved tests the resumed session did not collect (their files changed meanwhile)."""
    for nodeid in [*state.reports, *(str(h.get("nodeid")) for h in state.hung)]:
        replay(config, nodeid, state)


def argv_again() -> list[str]:
    """This interpreter's command line, as it was given (the state goes by `ENV`)."""
    return list(ORIG_ARGV)


def resumable() -> str | None:
    """Why pytest cannot be started again by exec here, or None: it must be the command
    (`pytest …`, `python -m pytest …`), not `pytest.main()` inside another program."""
    args = ORIG_ARGV
    if not args:
        return "the command line is not known"
    if "-c" in args[1:2]:
        return "pytest was started by `python -c`"
    main = sys.modules.get("__main__")
    origin = os.path.basename(str(getattr(main, "__file__", "") or ""))
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", "") in ("pytest.__main__", "pytest"):
        return None
    if origin in ("pytest", "py.test") or origin.startswith("pytest"):
        return None
    return f"pytest runs inside another program ({origin or 'unknown'})"
