"""`harness collect DIR…`: run report folders made elsewhere (the jobs of a CI matrix, or
separate `harness run`/`harness watch` processes, with no plan) told together exactly as a
local `--repeat` or `sweep --repeat` tells its own runs (docs/matrix.md).

- **Finding them**, bounded: folders at most `MAX_DEPTH` below each DIR, at most
  `MAX_ENTRIES` directory entries looked at and `MAX_REPORTS` reports; a folder holding a
  regular report.json is a run (its own subfolders, evidence and workdir, are not walked);
  no link is followed, and a link that points out of its DIR is refused with one line.
  Each report is read by `report.load.load_report` (bounded, confined, its schema_version
  one this harness reads).
- **Cells from the reports themselves**: the variant (`variant.spec`), the trainer's
  environment overrides (`command.env`, less the host profile's presets), the
  `--section.key=value` arguments of the trainer (`command.argv`) and the host conditions
  (`conditions`: the profile's name). The axes are the coordinates whose values differ; they
  carry a sweep's own labels (`--vec.num_buffers`, `OMP_WAIT_POLICY`, `variant`, `host`).
- **Told together**: one cell → the aggregate of a local `--repeat` (repeat.json …); several
  → a local sweep's sweep.json, each cell's runs combined (`pipeline.repeat.combined`,
  its aggregate in `cells/NNN/`) and the knobs judged by `pipeline.sweep.conclude`."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError
from harness.execute.conditions import HostConditions
from harness.filenames import REPORT_JSON
from harness.outcome import USAGE
from harness.pipeline.repeat import FAILED, Target, combined
from harness.pipeline.sweep import Knob, SweepResult, conclude
from harness.report import repeat as aggregate
from harness.report.load import load_report
from harness.report.matrix import Matrix, write_matrix
from harness.report.model import Report
from harness.report.repeat import RUN_AXIS
from harness.report.runs import RunRow, row_from_report
from harness.vocab import AxisKind

MAX_DEPTH = 6  # a sweep's runs sit 5 below its folder (cells/NNN/runs/NNN/<run>)
MAX_REPORTS = 4096  # 16 full GitHub matrices
MAX_ENTRIES = 200_000  # directory entries looked at, over all DIRs
UNSET = "(none)"  # a coordinate a run does not have (no variant, no host profile)

# a trainer argument the way a sweep passes `--set section.key=value`
_SET_ARG = re.compile(r"--([A-Za-z_][\w-]*(?:\.[\w-]+)+)=(.*)", re.DOTALL)
_KIND_ORDER = (AxisKind.SET, AxisKind.ENV, AxisKind.VARIANT, AxisKind.HOST)
Coord = tuple[AxisKind, str]  # (kind, name): --set vec.x → (SET, "vec.x")


@dataclass
class Cell:
    """The runs of one set of coordinates, in the order they were found."""

    values: dict[str, str]  # axis label → value
    variant: str
    rows: list[RunRow] = field(default_factory=list)


@dataclass
class Collected:
    env: str | None  # the scenario, or None for watched commands
    what: str  # the env, or the watched program's name: the title's subject
    knobs: list[Knob]  # the axes, with the values seen (in the order first seen)
    cells: list[Cell]
    builds: dict[str, str]  # variant → its first run's build, as a local sweep says it

    @property
    def runs(self) -> int:
        return sum(len(c.rows) for c in self.cells)


# ---------------------------------------------------------------- finding the reports


class _Budget:
    def __init__(self) -> None:
        self.entries = 0


def find_reports(dirs: Sequence[Path]) -> list[Path]:
    """The run report folders under `dirs`, each once, in path order within each DIR."""
    budget = _Budget()
    found: list[Path] = []
    seen: set[str] = set()
    for top in dirs:
        for folder in _walk(top, budget):
            real = os.path.realpath(folder)
            if real not in seen:
                seen.add(real)
                found.append(folder)
        if len(found) > MAX_REPORTS:
            raise HarnessError(
                f"more than {MAX_REPORTS} run reports under {', '.join(map(str, dirs))}: "
                f"collect at most {MAX_REPORTS} at once",
                USAGE,
            )
    if not found:
        where = ", ".join(map(str, dirs))
        raise HarnessError(
            f"no run report under {where} (a run's folder holds {REPORT_JSON}; looked "
            f"{MAX_DEPTH} levels deep)",
            USAGE,
        )
    return found


def _walk(top: Path, budget: _Budget) -> list[Path]:
    if not top.is_dir():
        what = "not a folder" if top.exists() or top.is_symlink() else "no such folder"
        raise HarnessError(f"{top}: {what}", USAGE)
    root = os.path.realpath(top)
    found: list[Path] = []
    stack: list[tuple[Path, int]] = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise HarnessError(f"{folder}: cannot read: {exc.strerror or exc}", USAGE) from None
        budget.entries += len(entries)
        if budget.entries > MAX_ENTRIES:
            raise HarnessError(
                f"{top}: more than {MAX_ENTRIES} files and folders looked at: give the "
                "folders that hold the runs",
                USAGE,
            )
        report = next((e for e in entries if e.name == REPORT_JSON), None)
        if report is not None:
            if report.is_symlink() or not report.is_file(follow_symlinks=False):
                what = "a symbolic link" if report.is_symlink() else "not a regular file"
                raise HarnessError(f"{report.path}: {what}: not a run's report", USAGE)
            found.append(folder)
            continue  # a run's own subfolders are its evidence and workdir, not runs
        subfolders = []
        for entry in entries:
            if entry.is_symlink():
                _refuse_link_out(entry.path, root, top)
                continue  # a link inside: its target is walked as itself
            if depth < MAX_DEPTH and entry.is_dir(follow_symlinks=False):
                subfolders.append(Path(entry.path))
        stack += [(p, depth + 1) for p in reversed(subfolders)]
    return found


def _refuse_link_out(path: str, root: str, top: Path) -> None:
    target = os.path.realpath(path)
    if os.path.commonpath([root, target]) != root:
        raise HarnessError(
            f"{path}: a symbolic link out of {top} (to {target}): collect reads only inside "
            "the folders it is given",
            USAGE,
        )


# ---------------------------------------------------------------- a run's coordinates


def coordinates(report: Report) -> dict[Coord, str]:
    """What the run was made with, read from its report: variant, environment overrides,
    `--section.key=value` trainer arguments, host conditions."""
    coords: dict[Coord, str] = {}
    conditions: HostConditions | None = getattr(report, "conditions", None)
    presets = conditions.env if conditions is not None else {}
    if report.command is not None:
        for key, value in report.command.env.items():
            if presets.get(key) != value:  # a preset is the host profile's, not a knob
                coords[(AxisKind.ENV, key)] = value
        for arg in report.command.argv:
            m = _SET_ARG.fullmatch(arg)
            if m:
                coords[(AxisKind.SET, m[1])] = m[2]  # a later one wins, as in the trainer
    if report.variant is not None:
        coords[(AxisKind.VARIANT, "variant")] = report.variant.spec
    coords[(AxisKind.HOST, "host")] = _host(conditions)
    return coords


def _host(conditions: HostConditions | None) -> str:
    if conditions is None:
        return UNSET
    if conditions.profile:
        return conditions.profile
    return UNSET if conditions.empty else conditions.describe()


def _label(coord: Coord) -> str:
    kind, name = coord
    return Knob(kind, name, ()).label


def _build_text(report: Report) -> str | None:
    b = report.build
    if b is None:
        return None
    if not b.ok:
        return FAILED + b.first_error
    state = "cache hit" if b.cache_hit else f"built in {b.duration_s:.1f}s"
    return f"{state}, key {b.key}"


# ---------------------------------------------------------------- reading and grouping


@dataclass
class _Run:
    row: RunRow
    coords: dict[Coord, str]


def _read(folder: Path) -> tuple[_Run, Report]:
    report = load_report(folder)
    code = report.verdict.exit_code if report.verdict is not None else None
    return _Run(row_from_report(report, code), coordinates(report)), report


def collect(dirs: Sequence[Path]) -> Collected:
    """Every run under `dirs`, grouped into cells by the coordinates that differ."""
    runs: list[_Run] = []
    envs: dict[str | None, None] = {}
    plans: dict[str, str] = {}  # what must be the same in every run → its first value
    builds: dict[str, str] = {}
    what = ""
    for folder in find_reports(dirs):
        run, report = _read(folder)  # the report (its samples) is dropped here: only the row
        runs.append(run)
        envs[report.env] = None
        for name, value in _plan(report).items():
            if plans.setdefault(name, value) != value:
                raise HarnessError(
                    f"the runs are not of one plan: their {name} differs ({plans[name]!r} in "
                    f"one, {value!r} in {folder}): collect them apart",
                    USAGE,
                )
        what = what or report.env or _program(report)
        built = _build_text(report)
        if built is not None:
            builds.setdefault(run.row.variant, built)
    if len(envs) > 1:
        shown = ", ".join(e or "a watched command" for e in envs)
        raise HarnessError(
            f"the runs are of different envs ({shown}): collect the runs of one env at a time",
            USAGE,
        )
    knobs = _axes(runs)
    if len({k.label for k in knobs}) != len(knobs):
        raise HarnessError(
            "two coordinates share a label: " + ", ".join(k.label for k in knobs), USAGE
        )
    return Collected(next(iter(envs)), what, knobs, _cells(runs, knobs), builds)


def _plan(report: Report) -> dict[str, str]:
    """What is no knob of a sweep and must be the same in every collected run: the pin, the
    steps, and for a watched command the command itself (without its knob arguments)."""
    plan = {"pin": report.pin.name if report.pin is not None else "-"}
    if report.command is not None:
        plan["steps"] = str(report.command.steps)
        if report.env is None:  # a watched command: its argv is the plan
            argv = [a for a in report.command.argv if not _SET_ARG.fullmatch(a)]
            plan["command"] = " ".join(argv)
    return plan


def _program(report: Report) -> str:
    argv = report.command.argv if report.command is not None else []
    return Path(argv[0]).name if argv else report.run_id


def _axes(runs: Sequence[_Run]) -> list[Knob]:
    """The coordinates whose values differ across the runs, a sweep's kinds in its order."""
    names: dict[Coord, None] = {}
    for run in runs:
        names.update(dict.fromkeys(run.coords))
    knobs = []
    for coord in sorted(names, key=lambda c: (_KIND_ORDER.index(c[0]), c[1])):
        values = tuple(dict.fromkeys(r.coords.get(coord, UNSET) for r in runs))
        if len(values) > 1:
            knobs.append(Knob(coord[0], coord[1], values))
    return knobs


def _cells(runs: Sequence[_Run], knobs: Sequence[Knob]) -> list[Cell]:
    cells: dict[tuple[str, ...], Cell] = {}
    for run in runs:
        key = tuple(run.coords.get((k.kind, k.name), UNSET) for k in knobs)
        if key not in cells:
            values = {k.label: v for k, v in zip(knobs, key, strict=True)}
            cells[key] = Cell(values, run.row.variant)
        cells[key].rows.append(run.row)
    repeated = any(len(c.rows) > 1 for c in cells.values())
    for cell in cells.values():
        for n, row in enumerate(cell.rows, 1):
            # as a local run labels its rows: the cell's values, then the run's number
            row.values = {**cell.values, **({RUN_AXIS: str(n)} if repeated else {})}
    return list(cells.values())


# ---------------------------------------------------------------- told together


def _no_argv(folder: Path) -> list[str]:
    raise AssertionError(f"a collected run is not started again ({folder})")


def tell(found: Collected, out: Path) -> tuple[Matrix, int]:
    """Write the aggregate of the runs in `out` (repeat.json for one cell, sweep.json and
    each cell's aggregate for several); the table and the exit code a local run gives."""
    runs = found.runs
    if len(found.cells) == 1:
        rows = found.cells[0].rows
        for n, row in enumerate(rows, 1):  # one cell: its runs are numbered, as --repeat does
            row.values = {RUN_AXIS: str(n)}
        title = f"harness collect {found.what}: {runs} run(s)"
        m = aggregate.repeat_matrix(title, found.env, rows, out)
        write_matrix(m, out, also_report_html=True)
        return m, aggregate.exit_code(rows)
    targets = [
        Target(out / "cells" / f"{i:03d}", _no_argv, c.values, c.variant)
        for i, c in enumerate(found.cells)
    ]
    by_target = combined(targets, {i: c.rows for i, c in enumerate(found.cells)})
    rows = [by_target[i] for i in range(len(targets))]
    result = SweepResult(found.what, found.knobs, rows, out, dict(found.builds))
    result.conclusion = conclude(found.knobs, rows)
    m = result.matrix()
    m.title = f"harness collect {found.what}: {len(rows)} cells, {runs} run(s)"
    m.env = found.env
    write_matrix(m, out)
    return m, result.exit_code
