"""`harness sweep ENV`: the knob matrix the report's author tried by hand, run and judged.

Cells are the cartesian product of `--set section.key=v1,v2` (trainer config, passed the
upstream's way: `--section.key=value`), `--env KEY=v1,v2` (the trainer's environment:
OMP_WAIT_POLICY, OMP_NUM_THREADS …) and `--variants a,b` (source and build variants, e.g.
`env:CC=clang` where the pin's build honours CC). Each cell is a normal `harness run` in its
own process (its own session, its own report, a hard timeout), so one cell can never leave
anything to the next; each distinct variant is built once before the cells (the cells are
then cache hits). The conclusion says which knobs change the outcome and which are ruled out.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness import variants
from harness.config.defaults import default_pin
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.pipeline.options import RunOptions, option_flags
from harness.pipeline.stages import limits_for, verify_prepare_build
from harness.process import proctree
from harness.report.matrix import Matrix
from harness.report.runs import RunRow, load_row, row_from_error
from harness.vocab import AxisKind

MARGIN_S = 120.0  # startup, sampling and report writing on top of the cell's wall limit
CELL_ENV_DROP = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")
STOP_GRACE_S = 10.0  # a stopped cell's harness writes its partial report in this time
FAILED = "failed: "  # a variant's build entry that says why it failed


@dataclass(frozen=True)
class Knob:
    """One dimension of the sweep: `--set train.lr`, `--env OMP_WAIT_POLICY` or `variant`."""

    kind: AxisKind
    name: str
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        return {
            AxisKind.SET: f"--{self.name}",
            AxisKind.ENV: self.name,
            AxisKind.VARIANT: "variant",
        }[self.kind]


@dataclass
class Cell:
    """One planned run of the matrix: its coordinates (knob label → value) and what it runs;
    its outcome is a RunRow."""

    index: int
    values: dict[str, str]
    variant: str
    trainer_env: dict[str, str]
    trainer_args: list[str]


@dataclass
class SweepResult:
    env: str
    knobs: list[Knob]
    rows: list[RunRow]  # one per cell, in the cells' order
    directory: Path
    builds: dict[str, str] = field(default_factory=dict)  # variant → "built …" or "failed: …"
    conclusion: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every cell ran (whatever it found), 1 when some could not."""
        return 1 if any(r.kind is Kind.ERROR for r in self.rows) else 0

    def matrix(self) -> Matrix:
        return Matrix(
            mode="sweep",
            title=f"harness sweep {self.env}",
            axes=[k.label for k in self.knobs],
            rows=self.rows,
            conclusion=self.conclusion,
            env=self.env,
            rows_key="cells",
            extra={
                "knobs": [
                    {"kind": k.kind, "name": k.name, "values": list(k.values)} for k in self.knobs
                ],
                "builds": self.builds,
                "distinct_build_keys": len({r.build_key for r in self.rows if r.build_key}),
            },
        )


def parse_knobs(sets: Sequence[str], envs: Sequence[str], variant_list: str | None) -> list[Knob]:
    knobs: list[Knob] = []
    for kind, items in ((AxisKind.SET, sets), (AxisKind.ENV, envs)):
        for item in items:
            name, sep, values = item.partition("=")
            vals = tuple(v for v in values.split(",") if v != "")
            if not sep or not name or not vals:
                flag = "--set section.key=v1,v2" if kind is AxisKind.SET else "--env KEY=v1,v2"
                raise HarnessError(f"expected {flag}, got {item!r}", USAGE)
            if kind is AxisKind.SET and "." not in name:
                raise HarnessError(f"--set needs section.key (e.g. vec.num_threads), got {name!r}")
            knobs.append(Knob(kind, name.lstrip("-"), vals))
    if variant_list is not None:
        vals = tuple(v.strip() for v in variant_list.split(",") if v.strip())
        if not vals:
            raise HarnessError(f"--variants names no variant: {variant_list!r}", USAGE)
        knobs.append(Knob(AxisKind.VARIANT, "variant", vals))
    if not knobs:
        raise HarnessError("a sweep needs at least one --set, --env or --variants", USAGE)
    names = [k.label for k in knobs]
    if len(set(names)) != len(names):
        raise HarnessError(f"a knob is given twice: {', '.join(names)}", USAGE)
    return knobs


def cells_for(knobs: Sequence[Knob], base: RunOptions) -> list[Cell]:
    cells = []
    for i, combo in enumerate(itertools.product(*(k.values for k in knobs))):
        env = dict(base.trainer_env)
        args = list(base.trainer_args)
        variant = base.variant
        values = {}
        for knob, value in zip(knobs, combo, strict=True):
            values[knob.label] = value
            if knob.kind is AxisKind.SET:
                args.append(f"--{knob.name}={value}")
            elif knob.kind is AxisKind.ENV:
                env[knob.name] = value
            else:
                variant = value
        cells.append(Cell(i, values, variant, env, args))
    return cells


def _harness_argv(base: RunOptions, cell: Cell, report_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "harness", "run", base.env, "--variant", cell.variant]
    argv += ["--report-dir", str(report_dir), "--quiet"]  # the sweep reports cells
    cell_opts = base.but(trainer_env=cell.trainer_env, trainer_args=cell.trainer_args)
    return argv + option_flags(cell_opts, watch=True)


class _Cells:
    """The cells' harness processes now running, each in its own session.

    Started with Popen here, not process/tools.run_tool: run_tool waits for its child in the
    calling thread and offers no handle, while a sweep must stop running cells from another
    thread (an interrupt, or the sweep's own limit) the way a user would: SIGTERM first, so
    the cell's harness kills its trainer and writes its partial report, then the whole
    session is killed and reaped (proctree.kill_tree). Every path ends in `stop` or in a
    normal exit of the cell: its limit (`stop`), an exception in the waiting thread
    (`stop`, then re-raised), the sweep interrupted (`stop_all`, and nothing new starts)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def run(self, argv: list[str], timeout: float) -> tuple[int | None, str, bool]:
        """(exit code, stderr, timed out); the code is None when the cell was stopped."""
        with self.lock:
            if self.stopping:  # the sweep is being stopped: start nothing new
                return None, "the sweep was stopped", False
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # the cell's report folder says what it found
                stderr=subprocess.PIPE,
                start_new_session=True,
                # a cell's own summary and annotations would repeat the sweep's matrix
                env={k: v for k, v in os.environ.items() if k not in CELL_ENV_DROP},
            )
            self.live.add(proc)
        timed_out = False
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(proc)
            err = b""
        except BaseException:  # interrupted while waiting: this cell goes with the sweep
            self.stop(proc)
            raise
        finally:
            with self.lock:
                self.live.discard(proc)
        code = None if timed_out else proc.returncode
        return code, (err or b"").decode("utf-8", "replace"), timed_out

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
        proctree.kill_tree(proc, proc.pid)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            running = list(self.live)
        for proc in running:
            self.stop(proc)


def _run_cell(base: RunOptions, cell: Cell, out: Path, limit_s: float, runner: _Cells) -> RunRow:
    """One cell in a child harness; its row is read from the report it wrote (load_report),
    in a folder of its own so that parallel cells never mix up their reports."""
    folder = out / "cells" / f"{cell.index:03d}"
    start = time.monotonic()
    code, stderr, timed_out = runner.run(_harness_argv(base, cell, folder), limit_s)
    if timed_out:
        why = f"the cell's harness timed out after {limit_s:.0f}s"
    else:
        why = (stderr.strip().splitlines() or [f"no report (exit {code})"])[-1][:300]
    row = load_row(folder, code, cell.values, cell.variant, why)
    if timed_out:  # its partial report, if any, is linked; the row says why it is partial
        row.kind, row.summary, row.error = Kind.ERROR, why, why
    row.wall_s = time.monotonic() - start
    return row


def conclude(knobs: Sequence[Knob], rows: Sequence[RunRow]) -> list[str]:
    """For each knob: does changing only it (the other knobs held) ever change the verdict?"""
    lines = []
    ran = [r for r in rows if r.kind is not Kind.ERROR]
    for knob in knobs:
        others = [k.label for k in knobs if k is not knob]
        groups: dict[tuple[str, ...], set[Kind]] = {}
        for r in ran:
            key = tuple(r.values[o] for o in others)
            groups.setdefault(key, set()).add(r.kind)
        changed = [g for g, kinds in groups.items() if len(kinds) > 1]
        by_value: dict[str, set[Kind]] = {}
        for r in ran:
            by_value.setdefault(r.values[knob.label], set()).add(r.kind)
        shown = "; ".join(f"{v} → {'/'.join(sorted(k))}" for v, k in by_value.items())
        if not groups:
            lines.append(f"{knob.label}: not judged (no cell ran)")
        elif changed:
            lines.append(f"{knob.label} changes the outcome ({shown})")
        else:
            lines.append(f"{knob.label} is ruled out: the same verdict for every value ({shown})")
    errors = sum(r.kind is Kind.ERROR for r in rows)
    if errors:
        lines.append(f"{errors} cell(s) could not run: see their summaries")
    return lines


def _build_all(
    base: RunOptions, pin: Pin, specs: Sequence[str], upstream_env: str
) -> dict[str, str]:
    """Each variant built once, here, before the cells: the cells' own builds are then
    cache hits, and a variant that does not build fails its cells without running them."""
    builds: dict[str, str] = {}
    for spec in specs:
        try:
            res = verify_prepare_build(
                pin, upstream_env, spec, base.checkout, base.allow_drift, progress=base.progress
            ).result
        except HarnessError as exc:
            builds[spec] = FAILED + exc.message
            continue
        state = "cache hit" if res.cache_hit else f"built in {res.duration_s:.1f}s"
        if res.notes:  # a damaged cache entry was rebuilt
            state += f" ({'; '.join(res.notes)})"
        builds[spec] = f"{state}, key {res.key}" if res.ok else FAILED + res.first_error
    return builds


def run_sweep(base: RunOptions, knobs: Sequence[Knob], out: Path, jobs: int = 1) -> SweepResult:
    """Validate, build each variant once, run every cell (up to `jobs` at a time)."""
    scenario = load_scenario(base.scenario or base.env)
    pin = load_pin(base.pin or default_pin(base.checkout))
    settings = scenario.settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    cells = cells_for(knobs, base)
    specs = sorted({c.variant for c in cells})
    for spec in specs:  # a typo fails now, not after an hour
        variants.parse_variant(spec, pin)
    rows: list[RunRow | None] = [None] * len(cells)
    result = SweepResult(base.env, list(knobs), [], out)
    progress = base.progress
    try:
        result.builds = _build_all(base, pin, specs, settings.upstream_env)
        limit_s = limits_for(base, settings).wall_s + MARGIN_S
        _run_cells(base, cells, rows, out, limit_s, jobs, result.builds)
    finally:
        progress.close()
    result.rows = [r for r in rows if r is not None]
    result.conclusion = conclude(knobs, result.rows)
    return result


def _run_cells(
    base: RunOptions,
    cells: Sequence[Cell],
    rows: list[RunRow | None],
    out: Path,
    limit_s: float,
    jobs: int,
    builds: dict[str, str],
) -> None:
    done = 0
    runner = _Cells()
    lock = threading.Lock()

    def one(cell: Cell) -> None:
        nonlocal done
        build = builds.get(cell.variant, "")
        if build.startswith(FAILED):  # its cells would only rebuild and fail in their limit
            why = f"the build of {cell.variant} {build}"
            row = row_from_error(why, None, cell.values, cell.variant)
        else:
            row = _run_cell(base, cell, out, limit_s, runner)
        rows[cell.index] = row
        with lock:
            done += 1
            where = f" in {row.location}" if row.location else ""
            shown = ", ".join(f"{k}={v}" for k, v in cell.values.items())
            base.progress.phase("cells", f"{done}/{len(cells)} ({shown}) → {row.kind}{where}")

    pool = ThreadPoolExecutor(max_workers=jobs) if jobs > 1 else None
    try:
        if pool is None:
            for cell in cells:
                one(cell)
        else:
            list(pool.map(one, cells))
            pool.shutdown(wait=True)
    except BaseException:  # interrupted: no cell may outlive the sweep
        runner.stop_all()
        if pool is not None:  # queued cells never start; running ones were just stopped
            pool.shutdown(wait=False, cancel_futures=True)
        raise
