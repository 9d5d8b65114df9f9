"""The typed model of a run's report and its serialization to report.json (schema:
docs/report-schema.md). Every field is a dataclass or a plain value; `to_json` is the only
place that turns them into the documented keys."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import psutil
from pydantic import ConfigDict

from harness import __version__
from harness.analysis.checks import CheckResult
from harness.analysis.classify import Verdict
from harness.build import BuildResult
from harness.doctor.fingerprint import HostFingerprint
from harness.execute.conditions import HostConditions
from harness.filenames import REPORT_JSON
from harness.hazards.model import HazardReport
from harness.jsonvalues import Measured
from harness.sampling.model import SampleSet
from harness.vocab import RunMode, RunStatus, Stage, Trigger
from harness.watch.watchdog import Limits

SCHEMA_VERSION = 2  # 2: trigger `closed`, samples.wake (links[].via), verdict.wake_chain, hazards
EVIDENCE_DIR = "evidence"  # what the checks read, copied into the report (docs/report-schema.md)
# under it: the build tree's config files at their relative paths, and the run's end-of-run
# log as the trainer's working folder held it (logs/<env>/)
CONFIG_EVIDENCE = f"{EVIDENCE_DIR}/config"
RUN_EVIDENCE = f"{EVIDENCE_DIR}/run"


def plain(value: Any) -> Any:
    """A JSON-ready copy: dataclasses as dicts, paths as strings, NaN as null."""
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def process_started(pid: int | None = None) -> float | None:
    """A process's start time (psutil create_time: epoch seconds), which with its pid names
    it: a reused pid has another; None when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


@dataclass
class PinInfo:
    name: str = ""
    file: str = ""
    # the pin's name, then the pins it extends (a scenario's [pin.X] and a check's `pins`
    # apply through any of them); with evidence/pin.json it rebuilds the pin as used
    lineage: list[str] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)  # the pin's [source] table
    variants: dict[str, str] = field(default_factory=dict)  # its aliases
    # the source verification (status, summary, commit and file hashes); None until verified
    verification: dict[str, Any] | None = None

    @property
    def verification_status(self) -> str | None:
        return None if self.verification is None else str(self.verification.get("status"))


@dataclass
class VariantInfo:
    spec: str
    steps: list[str] = field(default_factory=list)  # after alias expansion
    changes: list[str] = field(default_factory=list)  # every change made to the source


@dataclass
class CommandInfo:
    argv: list[str]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)  # the overrides, not the whole env
    steps: int | None = None  # run
    parser: str | None = None  # watch

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"argv": self.argv, "cwd": self.cwd, "env": self.env}
        if self.steps is not None or self.parser is None:
            data["steps"] = self.steps
        if self.parser is not None:
            data["parser"] = self.parser
        return data


@dataclass
class Timings:
    build_s: float | None = None
    run_s: float | None = None  # launch to verdict
    first_progress_s: float | None = None
    sampling_s: float | None = None


@dataclass
class ExitInfo:
    returncode: int | None = None  # None when the harness killed it
    signal: int | None = None
    killed_by_harness: bool = False
    reason: str = ""
    pid: int | None = None

    def describe(self) -> str:
        """How the command ended, for people."""
        if self.killed_by_harness:
            return (
                f"killed by the harness ({self.reason})" if self.reason else "killed by the harness"
            )
        if self.signal is not None:
            return f"signal {self.signal}"
        return "" if self.returncode is None else f"exit status {self.returncode}"


@dataclass
class Progress:
    frames: int = 0
    partial_frames: int = 0
    progress_events: int = 0
    output_lines: int = 0
    last_metrics: dict[str, Measured] = field(default_factory=dict)
    measured_sps: float | None = None
    progressing_at_end: bool = False
    output_tail: list[str] = field(default_factory=list)
    unparsed_lines: int = 0  # lines not parsed because the output outran the parser
    frames_total: int = 0  # frames parsed, including those not kept in memory
    # the trainer's own end-of-run record (exact: the dashboard rounds 1,048,576 to 1.05M)
    final_metrics: dict[str, Measured] = field(default_factory=dict)


@dataclass
class Cleanup:
    killed: list[int] = field(default_factory=list)
    reaped: list[int] = field(default_factory=list)
    leftover: list[int] = field(default_factory=list)


@dataclass
class Report:
    # how report.load reads report.json back (pydantic, over these type hints): every
    # number of a typed field finite, in the report and every dataclass under it (a
    # `Measured` value is the exception: jsonvalues)
    __pydantic_config__ = ConfigDict(allow_inf_nan=False)

    run_id: str
    directory: Path
    harness_argv: list[str]
    mode: RunMode
    status: RunStatus = RunStatus.RUNNING
    stage: Stage = Stage.START
    env: str | None = None
    pin: PinInfo | None = None
    variant: VariantInfo | None = None
    build: BuildResult | None = None
    command: CommandInfo | None = None
    limits: Limits | None = None
    timings: Timings = field(default_factory=Timings)
    trigger: Trigger | None = None
    exit: ExitInfo | None = None
    progress: Progress = field(default_factory=Progress)
    verdict: Verdict | None = None
    checks: list[CheckResult] = field(default_factory=list)
    samples: SampleSet | None = None
    cleanup: Cleanup = field(default_factory=Cleanup)
    notes: list[str] = field(default_factory=list)
    # report file → why it could not be written (a full disk, a read-only folder): the run's
    # verdict and exit code stand; these files are missing (report.store, report.writers)
    unwritten: dict[str, str] = field(default_factory=dict)
    started_at: str = field(default_factory=now_stamp)
    finished_at: str | None = None
    # evidence name → path relative to the report folder: every file a check reads
    evidence: dict[str, str] = field(default_factory=dict)
    # the harness process writing this report (set by `claim`; None on a report read back
    # that lacks them): a later reader whose harness_pid is gone (or is another process, by
    # its start time) knows a `running` report was abandoned
    harness_pid: int | None = None
    harness_started: float | None = None
    harness_host: str | None = None
    # the host as the run found it (doctor.fingerprint), and the conditions the run imposed
    # on it (--cpus, --cpu-quota, --memory, --load, a --host profile); None on a report
    # written before either was recorded (read back as None: report.load)
    host: HostFingerprint | None = None
    conditions: HostConditions | None = None
    # --hazards (docs/hazards.md): what the run's recorders saw; None when not recorded
    hazards: HazardReport | None = None
    # only on a report a reader found `abandoned` (report.store.mark_abandoned adds them to
    # the file as it was): when, how it knew, and when its harness last wrote report.json
    abandoned_at: str | None = None
    abandoned_why: str | None = None
    last_written_at: str | None = None

    def artifact(self, name: str) -> Path:
        return self.directory / name

    def files(self) -> list[str]:
        """The files of the report folder besides report.json and evidence/: what the
        writers of report/writers.py (and the runner's output.log) have left there. Hidden
        names are an atomic write in progress, not a file of the report."""
        try:
            entries = sorted(self.directory.iterdir())
        except OSError:
            return []
        return [
            p.name
            for p in entries
            if p.is_file() and not p.name.startswith(".") and p.name != REPORT_JSON
        ]

    def claim(self) -> Report:
        """This process writes the report: record its pid, start time and host."""
        self.harness_pid = os.getpid()
        self.harness_started = process_started(self.harness_pid)
        self.harness_host = socket.gethostname()
        return self

    @property
    def kind(self) -> str:
        """The verdict's kind, or the status while there is no verdict."""
        return self.verdict.kind if self.verdict else self.status

    @property
    def title(self) -> str:
        """What ran: the env, or the watched command."""
        if self.env:
            return self.env
        return " ".join(self.command.argv) if self.command else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "harness_version": __version__,
            "run_id": self.run_id,
            "mode": self.mode,
            "status": self.status,
            "stage": self.stage,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "harness_argv": self.harness_argv,
            "harness_pid": self.harness_pid,
            "harness_started": self.harness_started,
            "harness_host": self.harness_host,
            "env": self.env,
            "pin": plain(self.pin) if self.pin else {},
            "variant": plain(self.variant) if self.variant else {},
            "build": self.build.to_json() if self.build else None,
            "command": self.command.to_json() if self.command else {},
            "limits": plain(self.limits) if self.limits else {},
            "timings": plain(self.timings),
            "trigger": self.trigger,
            "exit": plain(self.exit) if self.exit else {},
            "progress": plain(self.progress),
            "verdict": plain(self.verdict),
            "checks": plain(self.checks),
            "samples": plain(self.samples) if self.samples is not None else None,
            "cleanup": plain(self.cleanup),
            "notes": self.notes,
            "unwritten": dict(self.unwritten),
            "artifacts": {name: name for name in self.files()},
            "evidence": dict(self.evidence),
            "host": self.host.to_json() if self.host is not None else None,
            "conditions": self.conditions.to_json() if self.conditions is not None else None,
            "hazards": plain(self.hazards) if self.hazards is not None else None,
        } | self.abandoned_marks()

    def abandoned_marks(self) -> dict[str, str]:
        """The keys of an abandoned report, those that are set (docs/report-schema.md)."""
        marks = {
            "abandoned_at": self.abandoned_at,
            "abandoned_why": self.abandoned_why,
            "last_written_at": self.last_written_at,
        }
        return {k: v for k, v in marks.items() if v is not None}
