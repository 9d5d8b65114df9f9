"""The two sides of `harness diff A B`, read: each a report (its folder or report.json) or a
repeat aggregate (its folder or repeat.json). An aggregate stands for its runs' rates, with
the settings and host of its first run's report, found inside the aggregate's folder.
Everything is read through report.reading and report.load: bounded, inside its folder; bad
input is one HarnessError line (USAGE)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness import outcome
from harness.contain import confined
from harness.errors import HarnessError
from harness.filenames import REPEAT_JSON, REPORT_JSON
from harness.outcome import USAGE, Kind
from harness.report.load import load_report
from harness.report.matrix import SCHEMA_VERSION as AGGREGATE_SCHEMA_VERSION
from harness.report.model import Report, plain
from harness.report.parsing import parse
from harness.report.reading import REPORT_JSON_LIMIT, read_json
from harness.report.repeat import NOT_RAN
from harness.report.signature import FailureSignature
from harness.stats import Rate
from harness.vocab import DiffSide, Mechanism, TableKind

MAX_GROUPS = 1000  # failure groups read from an aggregate
Bad = Callable[[str], HarnessError]


@dataclass
class Side:
    """A or B: what was given, what it is, the report its settings come from (None: an
    aggregate whose first run's report is not in its folder), and its runs by kind."""

    path: Path
    what: DiffSide
    report: Report | None
    counts: dict[Kind, int]
    signatures: list[FailureSignature]  # failures by signature, the most frequent first
    verdict: FailureSignature | None = None  # a single report's own verdict
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def ran(self) -> int:
        return sum(n for k, n in self.counts.items() if k not in NOT_RAN)

    @property
    def hang(self) -> Rate:
        return Rate(self.counts.get(Kind.HANG, 0), self.ran)

    @property
    def failure(self) -> Rate:
        failed = sum(n for k, n in self.counts.items() if outcome.reproduces(k))
        return Rate(failed, self.ran)

    def label(self) -> str:
        title = self.report.title if self.report is not None else ""
        return f"{self.what} {self.path}" + (f" ({title})" if title else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "what": self.what,
            "report_dir": str(self.report.directory) if self.report is not None else None,
            "runs": self.runs,
            "ran": self.ran,
            "counts": {str(k): n for k, n in self.counts.items()},
            "hang_rate": self.hang.value,
            "hang_rate_ci95": list(self.hang.ci95),
            "failure_rate": self.failure.value,
            "failure_rate_ci95": list(self.failure.ci95),
            "verdict": plain(self.verdict),
            "top_failure": plain(self.signatures[0]) if self.signatures else None,
        }


def read_side(path: Path) -> Side:
    """A report or a repeat aggregate at `path` (a folder or its file); one HarnessError
    line (USAGE) when it is neither, is damaged, or is newer than this harness reads."""
    if path.is_dir():
        if (path / REPORT_JSON).exists() or (path / REPORT_JSON).is_symlink():
            return _report_side(path)
        if (path / REPEAT_JSON).exists() or (path / REPEAT_JSON).is_symlink():
            return _aggregate_side(path, REPEAT_JSON)
        raise HarnessError(
            f"not a harness report or repeat aggregate: {path} has no {REPORT_JSON} "
            f"or {REPEAT_JSON}",
            USAGE,
        )
    if not path.exists() and not path.is_symlink():
        raise HarnessError(f"not a harness report or repeat aggregate: {path}: no such file")
    if path.name == REPEAT_JSON:
        return _aggregate_side(path.parent, path.name)
    return _report_side(path)


def _report_side(path: Path) -> Side:
    report = load_report(path)
    sig = FailureSignature.of_report(report)
    if report.verdict is None:  # an abandoned or failed run: its status stands for its verdict
        note = f"no verdict: the run is {report.status} at stage {report.stage}"
        return Side(path, DiffSide.REPORT, report, {sig.kind: 1}, [], sig, [note])
    failed = [sig] if outcome.reproduces(sig.kind) else []
    return Side(path, DiffSide.REPORT, report, {sig.kind: 1}, failed, sig)


@dataclass(frozen=True)
class _Group:
    kind: Kind
    mechanism: Mechanism | None = None
    location: str | None = None
    cause: str | None = None
    count: Annotated[int, Field(ge=0)] = 0


@dataclass(frozen=True)
class _Row:
    report_dir: str | None = None


@dataclass(frozen=True)
class Aggregate:
    """What diff reads of repeat.json (report/repeat.py and report/matrix.py write it),
    read through pydantic: a value of the wrong type is one line naming its key path."""

    # runs by verdict kind: at least one
    counts: Annotated[dict[Kind, Annotated[int, Field(ge=0, strict=True)]], Field(min_length=1)]
    groups: tuple[_Group, ...] = ()  # failures by signature
    rows: tuple[_Row, ...] = ()  # the first names the first run's report folder
    directory: str | None = None  # where the aggregate was written


def _aggregate_side(folder: Path, name: str) -> Side:
    where = folder / name
    data = read_json(folder, name, "not a repeat aggregate", REPORT_JSON_LIMIT)
    bad = _bad(where)
    if not isinstance(data, dict) or data.get("mode") != TableKind.REPEAT:
        raise bad('not an object with mode "repeat"')
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise bad(f"schema_version {version!r} is not a number")
    if version > AGGREGATE_SCHEMA_VERSION:
        raise HarnessError(
            f"{where}: schema_version {version} is newer than this harness reads "
            f"({AGGREGATE_SCHEMA_VERSION}): read it with a newer harness",
            USAGE,
        )
    known = dict(data)  # the keys Aggregate lacks are ignored
    if isinstance(known.get("groups"), list):
        known["groups"] = known["groups"][:MAX_GROUPS]
    try:
        agg = parse(Aggregate, known)
    except ValueError as exc:
        raise bad(str(exc)) from None
    groups = sorted(agg.groups, key=lambda g: -g.count)
    signatures = [FailureSignature(g.kind, g.mechanism, g.location, g.cause) for g in groups]
    first = agg.rows[0].report_dir if agg.rows else None
    report, notes = _first_run(folder, first, agg.directory)
    return Side(where, DiffSide.REPEAT, report, dict(agg.counts), signatures, None, notes)


def _bad(where: Path) -> Bad:
    """The maker of a damaged aggregate's one-line error."""
    return lambda why: HarnessError(f"{where}: not a repeat aggregate this version reads: {why}")


def _first_run(
    folder: Path, recorded: str | None, directory: str | None
) -> tuple[Report | None, list[str]]:
    """The report of the aggregate's first run, found inside the aggregate's folder: its
    recorded folder when that is inside, else the same path under wherever the aggregate is
    now (a CI artifact downloaded elsewhere). Never a folder outside it."""
    if not recorded:
        return None, ["its first run names no report folder: settings and host not compared"]
    for rel in _candidates(folder, recorded, directory):
        try:
            target = confined(folder, rel, what=f"{folder}: the first run's report")
        except HarnessError:
            continue
        if (target / REPORT_JSON).is_file():
            return load_report(target), []
    note = f"its first run's report {recorded} is not inside {folder}: settings not compared"
    return None, [note]


def _candidates(folder: Path, recorded: str, directory: str | None) -> list[str]:
    """Paths relative to `folder` that may hold the recorded report folder."""
    out: list[str] = []
    rec = Path(recorded)
    bases = [folder.resolve(), *([Path(directory)] if directory else [])]
    if rec.is_absolute():
        for base in bases:
            if rec.is_relative_to(base):
                out.append(str(rec.relative_to(base)))
    else:
        out.append(recorded)
    return [p for p in out if p not in ("", ".")]
