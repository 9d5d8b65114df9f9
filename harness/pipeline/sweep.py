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
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness import variants
from harness.config.defaults import default_pin
from harness.config.pin import check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.options import RunOptions, option_flags
from harness.pipeline.stages import limits_for
from harness.process import proctree, tools

BUILD_TIMEOUT_S = 3600.0  # a cell's own harness applies the pin's build timeout; this bounds it
MARGIN_S = 120.0  # startup, sampling and report writing on top of the cell's wall limit
CELL_ENV_DROP = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")
STOP_GRACE_S = 10.0  # a stopped cell's harness writes its partial report in this time


@dataclass(frozen=True)
class Knob:
    """One dimension of the sweep: `--set train.lr`, `--env OMP_WAIT_POLICY` or `variant`."""

    kind: str  # "set" | "env" | "variant"
    name: str
    values: tuple[str, ...]

    @property
    def label(self) -> str:
        return {"set": f"--{self.name}", "env": self.name, "variant": "variant"}[self.kind]


@dataclass
class Cell:
    index: int
    values: dict[str, str]  # knob label → value
    variant: str
    trainer_env: dict[str, str]
    trainer_args: list[str]
    kind: str = "not run"
    location: str | None = None
    summary: str = ""
    exit_code: int | None = None
    report_dir: str = ""
    build_key: str | None = None
    cache_hit: bool | None = None
    wall_s: float = 0.0


@dataclass
class SweepResult:
    env: str
    knobs: list[Knob]
    cells: list[Cell]
    directory: Path
    builds: dict[str, str] = field(default_factory=dict)  # variant → build key (or error)
    conclusion: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "schema_version": 1,
            "mode": "sweep",
            "env": self.env,
            "knobs": [
                {"kind": k.kind, "name": k.name, "values": list(k.values)} for k in self.knobs
            ],
            "cells": [vars(c) for c in self.cells],
            "builds": self.builds,
            "distinct_build_keys": len({c.build_key for c in self.cells if c.build_key}),
            "conclusion": self.conclusion,
        }


def parse_knobs(sets: Sequence[str], envs: Sequence[str], variant_list: str | None) -> list[Knob]:
    knobs: list[Knob] = []
    for kind, items in (("set", sets), ("env", envs)):
        for item in items:
            name, sep, values = item.partition("=")
            vals = tuple(v for v in values.split(",") if v != "")
            if not sep or not name or not vals:
                flag = "--set section.key=v1,v2" if kind == "set" else "--env KEY=v1,v2"
                raise HarnessError(f"expected {flag}, got {item!r}", USAGE)
            if kind == "set" and "." not in name:
                raise HarnessError(f"--set needs section.key (e.g. vec.num_threads), got {name!r}")
            knobs.append(Knob(kind, name.lstrip("-"), vals))
    if variant_list is not None:
        vals = tuple(v.strip() for v in variant_list.split(",") if v.strip())
        if not vals:
            raise HarnessError(f"--variants names no variant: {variant_list!r}", USAGE)
        knobs.append(Knob("variant", "variant", vals))
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
            if knob.kind == "set":
                args.append(f"--{knob.name}={value}")
            elif knob.kind == "env":
                env[knob.name] = value
            else:
                variant = value
        cells.append(Cell(i, values, variant, env, args))
    return cells


def _harness_argv(base: RunOptions, cell: Cell, report_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "harness", "run", base.env, "--variant", cell.variant]
    argv += ["--report-dir", str(report_dir), "--json", "--quiet"]  # the sweep reports cells
    cell_opts = base.but(trainer_env=cell.trainer_env, trainer_args=cell.trainer_args)
    return argv + option_flags(cell_opts, watch=True)


def _build_argv(base: RunOptions, upstream_env: str, variant: str) -> list[str]:
    argv = [sys.executable, "-m", "harness", "build", upstream_env, "--variant", variant]
    if base.pin:
        argv += ["--pin", base.pin]
    if base.checkout:
        argv += ["--checkout", str(base.checkout)]
    if base.allow_drift:
        argv.append("--allow-drift")
    return argv


class _Cells:
    """The cells' harness processes now running: each in its own session, so that a sweep
    that is interrupted (or times a cell out) stops them the way a user would: SIGTERM
    first (the cell's harness kills its trainer and writes its partial report), then the
    whole session is killed and reaped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def run(self, argv: list[str], timeout: float) -> tuple[int | None, str, str, bool]:
        with self.lock:
            if self.stopping:  # the sweep is being stopped: start nothing new
                return None, "", "the sweep was stopped", False
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                # a cell's own summary and annotations would repeat the sweep's matrix
                env={k: v for k, v in os.environ.items() if k not in CELL_ENV_DROP},
            )
            self.live.add(proc)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(proc)
            out, err = b"", b""
        except BaseException:  # interrupted while waiting: this cell goes with the sweep
            self.stop(proc)
            raise
        finally:
            with self.lock:
                self.live.discard(proc)
        code = None if timed_out else proc.returncode
        return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out

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


def _run_cell(base: RunOptions, cell: Cell, out: Path, limit_s: float, runner: _Cells) -> None:
    start = time.monotonic()
    code, stdout, stderr, timed_out = runner.run(_harness_argv(base, cell, out / "cells"), limit_s)
    cell.wall_s = time.monotonic() - start
    cell.exit_code = code
    if timed_out:
        cell.kind, cell.summary = "error", f"the cell's harness timed out after {limit_s:.0f}s"
        return
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        cell.kind, cell.summary = "error", last[:300]
        return
    verdict = report.get("verdict") or {}
    cell.kind = str(verdict.get("kind") or report.get("status"))
    cell.location = verdict.get("location")
    cell.summary = str(verdict.get("summary", ""))
    cell.report_dir = str(out / "cells" / str(report.get("run_id", "")))
    build = report.get("build") or {}
    cell.build_key, cell.cache_hit = build.get("key"), build.get("cache_hit")


def conclude(knobs: Sequence[Knob], cells: Sequence[Cell]) -> list[str]:
    """For each knob: does changing only it (the other knobs held) ever change the verdict?"""
    lines = []
    ran = [c for c in cells if c.kind not in ("error", "not run")]
    for knob in knobs:
        others = [k.label for k in knobs if k is not knob]
        groups: dict[tuple[str, ...], set[str]] = {}
        for c in ran:
            key = tuple(c.values[o] for o in others)
            groups.setdefault(key, set()).add(c.kind)
        changed = [g for g, kinds in groups.items() if len(kinds) > 1]
        by_value: dict[str, set[str]] = {}
        for c in ran:
            by_value.setdefault(c.values[knob.label], set()).add(c.kind)
        shown = "; ".join(f"{v} → {'/'.join(sorted(k))}" for v, k in by_value.items())
        if not groups:
            lines.append(f"{knob.label}: not judged (no cell ran)")
        elif changed:
            lines.append(f"{knob.label} changes the outcome ({shown})")
        else:
            lines.append(f"{knob.label} is ruled out: the same verdict for every value ({shown})")
    errors = sum(c.kind == "error" for c in cells)
    if errors:
        lines.append(f"{errors} cell(s) could not run: see their summaries")
    return lines


def run_sweep(
    base: RunOptions,
    knobs: Sequence[Knob],
    out: Path,
    jobs: int = 1,
    on_cell: Callable[[Cell, int], None] | None = None,
) -> SweepResult:
    """Validate, build each variant once, run every cell (up to `jobs` at a time)."""
    scenario = load_scenario(base.scenario or base.env)
    pin = load_pin(base.pin or default_pin(base.checkout))
    settings = scenario.settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    cells = cells_for(knobs, base)
    for spec in sorted({c.variant for c in cells}):  # a typo fails now, not after an hour
        variants.parse_variant(spec, pin)
    result = SweepResult(base.env, list(knobs), cells, out)
    for spec in sorted({c.variant for c in cells}):
        res = tools.run_tool(_build_argv(base, settings.upstream_env, spec), BUILD_TIMEOUT_S)
        text = (res.stdout + res.stderr).strip().splitlines()
        result.builds[spec] = (
            "built" if res.returncode == 0 else f"failed: {text[-1] if text else ''}"
        )
    limit_s = limits_for(base, settings).wall_s + MARGIN_S
    done = 0
    runner = _Cells()

    def one(cell: Cell) -> None:
        nonlocal done
        build = result.builds.get(cell.variant, "")
        if build.startswith("failed"):  # its cells would only rebuild and fail in their limit
            cell.kind, cell.summary = "error", f"the build of {cell.variant} {build}"
        else:
            _run_cell(base, cell, out, limit_s, runner)
        done += 1
        if on_cell is not None:
            on_cell(cell, done)

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
    result.conclusion = conclude(knobs, cells)
    return result
