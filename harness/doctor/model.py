"""What every doctor probe shares: the `Probe` result, its statuses, the `ProbeContext`
(time budget and PATH), the guard that keeps one broken probe from stopping the others,
and small helpers (temporary folders, the embedded C sources, one-line tool verdicts)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from harness.process.tools import ToolResult, find_tool, run_tool
from harness.vocab import DoctorStatus, values

STATUSES = values(DoctorStatus)
SCHEMA = "harness-doctor/1"


@dataclass
class Probe:
    name: str
    status: DoctorStatus
    detail: str
    hint: str = ""
    duration_s: float = 0.0


@dataclass
class ProbeContext:
    """What every probe shares: its time budget and the PATH its tools come from."""

    timeout_s: float
    path: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, timeout_s: float, path: str | None) -> ProbeContext:
        path = os.environ.get("PATH", os.defpath) if path is None else path
        return cls(timeout_s, path, {**os.environ, "PATH": path})

    def which(self, name: str) -> str | None:
        """A tool on our PATH; py-spy also next to this interpreter (see `find_tool`)."""
        return find_tool(name, self.path)

    def run(self, argv: Sequence[str], timeout: float | None = None) -> ToolResult:
        return run_tool(argv, timeout or self.timeout_s, env=self.env)


ProbeFn = Callable[[ProbeContext], Probe]


def guarded(name: str, fn: ProbeFn, ctx: ProbeContext) -> Probe:
    """A probe that raises is a harness bug, not a platform fact: report it and go on."""
    start = time.monotonic()
    try:
        probe = fn(ctx)
    except Exception as exc:
        probe = Probe(name, DoctorStatus.WARN, f"the probe itself failed: {exc!r}")
    probe.name = name
    probe.duration_s = round(time.monotonic() - start, 3)
    return probe


@contextlib.contextmanager
def tempdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="harness-doctor-") as tmp:
        yield Path(tmp)


def c_source(name: str) -> str:
    """One of the C programs the probes compile, shipped under harness/data/doctor/."""
    return resources.files("harness").joinpath(f"data/doctor/{name}").read_text()


def why(res: ToolResult) -> str:
    """One line saying how a tool run ended."""
    if res.timed_out:
        return f"timed out after {res.duration_s:.1f}s"
    lines = [ln.strip() for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
    first = next((ln for ln in lines if not ln.startswith(("[", "Using host"))), "no output")
    return f"exit {res.returncode}: {first[:160]}"
