"""Going on after a test hung in native code, without pytest-xdist: the test's failure is
built here, every report of the session so far is saved (`pytest_report_to_serializable`),
and pytest is started again in the same process (`os.execv`, same pid: the watcher's
successor follows it), from the folder it was started in, with the environment it was
started with, plus `HANG_WATCH_RESUME=STATE` (an environment variable, not an option: an
option after a `--` would be a file argument). The resumed session replays each saved
test in its place in the run order (`replay`: logstart, its reports, logfinish; the test
is not run again), so the terminal, the summary counts, JUnit and the exit status hold
every earlier test, and runs the others."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.files import atomic_write
from harness.pytest_plugin import channel

ENV = "HANG_WATCH_RESUME"
MAX_STATE = 256 * 1024 * 1024


@dataclass
class State:
    """Reports by node id, in the order they were logged; `hung` are the tests that were
    ended in native code (the header names them)."""

    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    locations: dict[str, list[Any]] = field(default_factory=dict)
    hung: list[dict[str, Any]] = field(default_factory=list)

    def add(self, config: pytest.Config, report: pytest.TestReport) -> None:
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        if isinstance(data, dict):
            self.reports.setdefault(report.nodeid, []).append(data)
            self.locations.setdefault(report.nodeid, list(report.location))

    def save(self, path: Path) -> None:
        data = {"reports": self.reports, "locations": self.locations, "hung": self.hung}
        # a user property may be anything (a Path): its text, as JUnit writes it
        text = json.dumps(data, default=str)
        atomic_write(path, text)


def load(path: Path) -> State:
    """The state a hung session left (removed once read: it is this session's alone)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_STATE))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"{ENV}={path}: cannot be read ({exc})") from None
    with contextlib.suppress(OSError):
        path.unlink()
    try:
        if not isinstance(data, dict):
            raise TypeError(type(data).__name__)
        reports = dict(data.get("reports", {}))
        return State(
            reports={str(k): [d for d in v if isinstance(d, dict)] for k, v in reports.items()},
            locations={str(k): list(v) for k, v in dict(data.get("locations", {})).items()},
            hung=[h for h in list(data.get("hung", [])) if isinstance(h, dict)],
        )
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{ENV}={path}: not a hang-watch state ({exc})") from None


def hung_reports(
    hang: channel.Hang, location: tuple[str, int | None, str], started: float
) -> list[pytest.TestReport]:
    """The hung phase failed with the verdict; a setup or call that hung is followed by a
    teardown that did not run (passed, as JUnit and the terminal need one to close the
    test)."""
    now = time.time()
    failed = pytest.TestReport(
        nodeid=hang.nodeid,
        location=location,
        keywords={},
        outcome="failed",
        longrepr=hang.message,
        when=hang.when,  # type: ignore[arg-type]
        duration=max(0.0, now - started),
        start=started,
        stop=now,
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
                start=now,
                stop=now,
            )
        )
    return out


def replay(config: pytest.Config, nodeid: str, state: State) -> bool:
    """Log the saved reports of `nodeid` as if it ran now; False when there are none."""
    saved = state.reports.pop(nodeid, None)
    if saved is None:
        return False
    location = tuple(state.locations.get(nodeid, [nodeid, None, nodeid]))
    config.hook.pytest_runtest_logstart(nodeid=nodeid, location=location)
    for data in saved:
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        if report is not None:
            config.hook.pytest_runtest_logreport(report=report)
    config.hook.pytest_runtest_logfinish(nodeid=nodeid, location=location)
    return True


def replay_rest(config: pytest.Config, state: State) -> None:
    """Saved tests the resumed session did not collect (their files changed meanwhile)."""
    for nodeid in list(state.reports):
        replay(config, nodeid, state)


def argv_again() -> list[str]:
    """This interpreter's command line, as it was given (the state goes by `ENV`)."""
    return list(sys.orig_argv)


def resumable() -> str | None:
    """Why pytest cannot be started again by exec here, or None: it must be the command
    (`pytest …`, `python -m pytest …`), not `pytest.main()` inside another program."""
    args = sys.orig_argv
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
