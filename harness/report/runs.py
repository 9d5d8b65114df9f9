"""One run in a multi-run table: a row of `harness compare` (a variant), `harness sweep` (a
cell of the knob matrix) and `harness bisect` (a run of a tested commit).

A row is built from a run's typed report (`row_from_report`; a child's report folder read
back with `load_report`: `load_row`) or from why the run could not be prepared
(`row_from_error`). What labels it (variant, knob values, commit) are its `values`, by column
label; everything else is what every multi-run command shows. A row stands for `runs` runs:
one today; a repeated run (`--repeat N`) will count its kinds in the same row
(`kinds`), so a rate is a column over rows, not a new type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import Kind
from harness.report.load import load_report
from harness.report.model import Report, plain
from harness.report.signature import FailureSignature, standing_kind
from harness.vocab import AxisKind, CheckStatus, Mechanism

EVIDENCE_LINES = 8  # a row keeps the verdict's first evidence lines; the report has them all


@dataclass
class RunRow:
    # what labels the row in its table: column label → value ({"variant": "stock"},
    # {"--vec.num_buffers": "2", "OMP_WAIT_POLICY": "active"}, {"commit": "abc123"})
    values: dict[str, str] = field(default_factory=dict)
    variant: str = ""  # the variant that ran (a column only where variants vary)
    kind: Kind = Kind.ERROR  # the verdict's kind; error: the run could not be prepared
    mechanism: Mechanism | None = None
    location: str | None = None
    location_frames: list[str] = field(default_factory=list)
    cause: str | None = None  # the top cause's id
    summary: str = ""  # the verdict's one line, or why the run could not be prepared
    error: str | None = None  # set when the run could not be prepared (or its harness failed)
    exit_code: int | None = None  # the harness's exit code; None: stopped at the sweep's limit
    run_s: float | None = None  # launch to verdict (the report's timings)
    wall_s: float | None = None  # the child harness's whole time (build, run, report), if any
    report_dir: str | None = None
    epochs: float | None = None
    sps: float | None = None
    checks_failed: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    build_key: str | None = None
    build_ok: bool | None = None
    build_s: float | None = None
    cache_hit: bool | None = None
    # how many runs the row stands for, and how many ended as each kind when they differ:
    # one run now (no counts: all of them are `kind`); --repeat will count into both
    runs: int = 1
    counts: dict[Kind, int] = field(default_factory=dict)
    # under --expect hazard:…, the expected hazard the run showed (whatever its verdict)
    hazard: str | None = None

    @property
    def signature(self) -> FailureSignature:
        return FailureSignature(self.kind, self.mechanism, self.location, self.cause)

    @property
    def kinds(self) -> dict[Kind, int]:
        """The runs by verdict kind: the counts, or every run as the row's kind."""
        return dict(self.counts) if self.counts else {self.kind: self.runs}

    def coordinate(self, label: str) -> str | None:
        """The row's value in column `label` (the variant also when it is not a knob)."""
        if label in self.values:
            return self.values[label]
        return (self.variant or None) if label == AxisKind.VARIANT else None

    def rate(self, kind: Kind) -> float:
        """The share of the row's runs that ended as `kind` (1.0 or 0.0 for one run)."""
        return self.kinds.get(kind, 0) / self.runs if self.runs else 0.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(self)
        del data["counts"]
        data["kinds"] = plain(self.kinds)
        return data


def row_from_report(
    report: Report,
    exit_code: int | None,
    values: dict[str, str] | None = None,
    variant: str | None = None,
) -> RunRow:
    """The row of a finished (or abandoned) run; a report without a verdict is an error row
    that says why (the harness's own note, else where it stopped)."""
    v = report.verdict
    build = report.build
    last = report.progress.last_metrics
    spec = variant if variant is not None else (report.variant.spec if report.variant else "")
    row = RunRow(
        values=dict(values or {}),
        variant=spec,
        exit_code=exit_code,
        run_s=report.timings.run_s,
        report_dir=str(report.directory),
        epochs=last.get("epoch"),
        sps=last.get("SPS"),
        checks_failed=[c.name for c in report.checks if c.status == CheckStatus.FAIL],
        hazard=report.hazards.expected[0].summary
        if report.hazards and report.hazards.expected
        else None,
        build_key=build.key if build else None,
        build_ok=build.ok if build else None,
        build_s=build.duration_s if build else None,
        cache_hit=build.cache_hit if build else None,
    )
    if v is None:
        why = report.notes[-1] if report.notes else ""
        row.summary = why or f"the run is {report.status} at stage {report.stage}"
        row.error = row.summary
        row.kind = standing_kind(report)
    else:
        row.kind = v.kind
        row.mechanism = v.mechanism
        row.location = v.location
        row.location_frames = list(v.location_frames)
        row.cause = v.causes[0].id if v.causes else None
        row.summary = v.summary
        row.evidence = list(v.evidence[:EVIDENCE_LINES])
    return row


def row_from_error(
    message: str,
    exit_code: int | None,
    values: dict[str, str] | None = None,
    variant: str = "",
    report_dir: str | None = None,
) -> RunRow:
    """The row of a run that could not be prepared (a variant that does not apply, a build
    tool missing, a child harness that died or timed out)."""
    return RunRow(
        values=dict(values or {}),
        variant=variant,
        kind=Kind.ERROR,
        summary=message,
        error=message,
        exit_code=exit_code,
        report_dir=report_dir,
    )


def load_row(
    folder: Path, exit_code: int | None, values: dict[str, str], variant: str, why_not: str
) -> RunRow:
    """The row of a run a child harness reported in `folder` (a report folder, or a folder
    holding exactly one); `why_not` is the error when there is no readable report."""
    found = [folder] if (folder / REPORT_JSON).is_file() else []
    found = found or sorted(p.parent for p in folder.glob(f"*/{REPORT_JSON}"))
    if len(found) != 1:
        return row_from_error(why_not, exit_code, values, variant)
    try:
        report = load_report(found[0])
    except HarnessError as exc:
        return row_from_error(exc.message, exit_code, values, variant, str(found[0]))
    return row_from_report(report, exit_code, values, variant)
