"""Repeated runs: `--repeat N` (every cell N times), `--repeat auto` (until the decision is
settled, compare), `--until-fail` (a cell stops at its first failure) and `--jobs J` (runs at
once). Every run is a child harness (pipeline/children.py) with its own report folder,
`<cell>/runs/NNN/`; the runs of a cell are told together by report/repeat.py.

The runs of all cells go into one queue, so `--jobs` runs cells and repeats side by side.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import outcome
from harness.config.defaults import default_pin
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import RunSettings, load_scenario
from harness.errors import HarnessError, Interrupted
from harness.execute.conditions import check_available
from harness.outcome import USAGE
from harness.pipeline.children import MARGIN_S, ArgvFor, ChildRuns, run_child
from harness.pipeline.options import RunOptions, WatchOptions, hazard_flags, option_flags
from harness.pipeline.run import check_watch
from harness.pipeline.stages import limits_for, verify_prepare_build
from harness.report import store
from harness.report.live import LiveProgress
from harness.report.matrix import write_matrix
from harness.report.repeat import RUN_AXIS, combine, repeat_matrix
from harness.report.runs import RunRow
from harness.vocab import AUTO, Phase

DEFAULT_CAP = 20  # --repeat auto: the most runs per cell unless --repeat-cap says otherwise
AUTO_FIRST = 4  # --repeat auto: the first round per cell (n/n against 0/n separates at 4)
FAILED = "failed: "  # a variant's build entry that says why it failed


@dataclass(frozen=True)
class Repeat:
    """How often each cell runs. `runs` is N, or the cap with `auto`."""

    runs: int = 1
    auto: bool = False
    until_fail: bool = False
    jobs: int = 1

    @property
    def repeated(self) -> bool:
        """Runs are nested under `runs/NNN` and told together (not for one plain run)."""
        return self.auto or self.runs > 1 or self.until_fail

    @property
    def first_round(self) -> int:
        return min(self.runs, AUTO_FIRST) if self.auto else self.runs

    def describe(self) -> str:
        if self.auto:
            return f"auto (at most {self.runs} per cell)"
        return f"{self.runs}" + (" until the first failure" if self.until_fail else "")


def parse_repeat(text: str, auto_ok: bool) -> tuple[int | None, bool]:
    """`--repeat N` → (N, False); `--repeat auto` → (None, True) where allowed."""
    if text == AUTO:
        if not auto_ok:
            raise HarnessError("--repeat auto is for compare and bisect; give a number", USAGE)
        return None, True
    if not text.isdigit() or int(text) < 1:
        raise HarnessError(f"--repeat takes a positive number or auto, not {text!r}", USAGE)
    return int(text), False


@dataclass(frozen=True)
class Target:
    """One cell whose runs are made by a child harness: where they go, how they start."""

    folder: Path
    argv_for: ArgvFor
    values: dict[str, str] = field(default_factory=dict)
    variant: str = ""


Done = Callable[[Target, RunRow], None]


class RunsInterrupted(Interrupted):
    """A signal while runs were being made: the rows of what finished so far (a row per
    cell, or per run for one repeated cell) and the folder they are in; the command writes
    its table of them before the harness exits 128 + N."""

    def __init__(self, signum: int, rows: list[RunRow], folder: Path) -> None:
        super().__init__(signum)
        self.rows = rows
        self.folder = folder

    @property
    def runs(self) -> int:
        return sum(r.runs for r in self.rows)

    def left(self) -> str:
        return (
            f"after {self.runs} finished run(s); their table and every run's report: {self.folder}"
        )


def progress_done(progress: LiveProgress, total: int | None = None) -> Done:
    """A progress line per finished run: `3/8 (variant=stock, run=2) → hang in env_start`."""
    lock = threading.Lock()
    count = 0

    def done(target: Target, row: RunRow) -> None:
        nonlocal count
        with lock:
            count += 1
            where = f" in {row.location}" if row.location else ""
            shown = ", ".join(f"{k}={v}" for k, v in row.values.items())
            of = f"/{total}" if total else ""
            progress.phase(Phase.RUNS, f"{count}{of} ({shown}) → {row.kind}{where}")

    return done


def run_rounds(
    targets: Sequence[Target],
    more: Mapping[int, int],
    rows: dict[int, list[RunRow]],
    plan: Repeat,
    runner: ChildRuns,
    limit_s: float,
    done: Done | None = None,
) -> None:
    """`more[i]` further runs of `targets[i]`, added to `rows[i]` (kept in run order), up to
    `plan.jobs` at once; with `until_fail` a cell that failed starts no further run."""
    lock = threading.Lock()
    failed = {i for i, rs in rows.items() if plan.until_fail and any(_failed(r) for r in rs)}
    tasks: list[Callable[[], None]] = []
    for i, target in enumerate(targets):
        have = len(rows.setdefault(i, []))
        for n in range(have, have + more.get(i, 0)):
            tasks.append(_task(i, n, target, rows, failed, lock, plan, runner, limit_s, done))
    try:
        run_all(tasks, plan.jobs, runner)
    finally:  # interrupted too: the runs that finished, in order, for the partial table
        for rs in rows.values():
            rs.sort(key=lambda r: int(r.values.get(RUN_AXIS) or 0))


def _failed(row: RunRow) -> bool:
    return outcome.reproduces(row.kind)


def _task(
    i: int,
    n: int,
    target: Target,
    rows: dict[int, list[RunRow]],
    failed: set[int],
    lock: threading.Lock,
    plan: Repeat,
    runner: ChildRuns,
    limit_s: float,
    done: Done | None,
) -> Callable[[], None]:
    def one() -> None:
        with lock:
            if i in failed:  # --until-fail: this cell has failed already
                return
        values = dict(target.values)
        folder = target.folder
        if plan.repeated:
            values[RUN_AXIS] = str(n + 1)
            folder = folder / "runs" / f"{n + 1:03d}"
        row = run_child(target.argv_for, folder, limit_s, runner, values, target.variant)
        with lock:
            rows[i].append(row)
            if plan.until_fail and _failed(row):
                failed.add(i)
        if done is not None:
            done(target, row)

    return one


def run_all(tasks: Sequence[Callable[[], None]], jobs: int, runner: ChildRuns) -> None:
    """Each task, up to `jobs` at once; interrupted: no child outlives the parent."""
    threads: list[threading.Thread] = []
    queue = list(reversed(tasks))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not queue or errors:
                    return
                task = queue.pop()
            try:
                task()
            except BaseException as exc:  # the first error stops the others, then is raised
                with lock:
                    errors.append(exc)
                runner.stop_all()
                return

    if jobs <= 1:
        try:
            for task in tasks:
                task()
        except BaseException:
            runner.stop_all()
            raise
        return
    for _ in range(min(jobs, len(tasks))):
        threads.append(threading.Thread(target=worker, daemon=True))
        threads[-1].start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # interrupted in the main thread: stop every child, then go
        with lock:
            queue.clear()
        runner.stop_all()
        for t in threads:
            t.join(timeout=30)
        raise
    if errors:
        raise errors[0]


def combined(targets: Sequence[Target], rows: Mapping[int, list[RunRow]]) -> dict[int, RunRow]:
    """A row per target that has runs (by its index): its single run, or its runs combined."""
    out: dict[int, RunRow] = {}
    for i, t in enumerate(targets):
        rs = rows.get(i, [])
        if len(rs) == 1 and RUN_AXIS not in rs[0].values:
            out[i] = rs[0]
        elif rs:
            out[i] = combine(rs, t.values, t.variant, t.folder)
            # the cell's own aggregate, which its row links to
            title = ", ".join(f"{k}={v}" for k, v in t.values.items()) or t.folder.name
            cell = repeat_matrix(title, None, rs, t.folder)
            write_matrix(cell, t.folder, also_report_html=True, step_summary=False)
    return out


def run_argv(
    base: RunOptions,
    variant: str,
    trainer_env: dict[str, str] | None = None,
    trainer_args: list[str] | None = None,
    host: str | None = None,
) -> ArgvFor:
    """The child `harness run` of one cell: the base options with this cell's variant,
    environment, arguments and host profile, reporting into the folder it is given."""
    opts = base.but(
        variant=variant,
        trainer_env=base.trainer_env if trainer_env is None else trainer_env,
        trainer_args=base.trainer_args if trainer_args is None else trainer_args,
    )
    flags = option_flags(opts, watch=True)
    if host is not None:  # after the base's own flags: a cell's profile is the cell's
        flags += ["--host", host]

    def argv(folder: Path) -> list[str]:
        head = [sys.executable, "-m", "harness", "run", base.env, "--variant", variant]
        return [*head, "--report-dir", str(folder), "--quiet", *flags]

    return argv


def watch_argv(opts: WatchOptions) -> ArgvFor:
    """The child `harness watch` of a repeated watch."""
    flags = [
        "--timeout", str(opts.timeout_s),
        "--startup", str(opts.startup_s),
        "--stall", str(opts.stall_s),
        "--quiescent", str(opts.quiescent_s),
        "--parser", opts.parser,
        "--cwd", str(opts.cwd),
        "--native", opts.sampling.native,
        "--python-stacks", opts.sampling.python,
    ]  # fmt: skip
    flags += [] if opts.sampling.enabled else ["--no-sample"]
    for key, value in opts.trainer_env.items():
        flags += ["--env", f"{key}={value}"]
    flags += _condition_flags(opts)
    flags += hazard_flags(opts.hazards, opts.expect_hazard)

    def argv(folder: Path) -> list[str]:
        head = [sys.executable, "-m", "harness", "watch", "--report-dir", str(folder)]
        return [*head, "--quiet", *flags, "--", *opts.argv]

    return argv


def _condition_flags(opts: object) -> list[str]:
    """The host conditions' flags, where the options carry them."""
    conditions = getattr(opts, "conditions", None)
    flags = getattr(conditions, "flags", None)
    return list(flags()) if callable(flags) else []


def build_each(base: RunOptions, pin: Pin, specs: Sequence[str], env: str) -> dict[str, str]:
    """Each variant built once, here, before its runs: the runs' own builds are then cache
    hits, and a variant that does not build fails its cells without running them."""
    builds: dict[str, str] = {}
    for spec in specs:
        try:
            res = verify_prepare_build(
                pin, env, spec, base.checkout, base.allow_drift, progress=base.progress
            ).result
        except HarnessError as exc:
            builds[spec] = FAILED + exc.message
            continue
        state = "cache hit" if res.cache_hit else f"built in {res.duration_s:.1f}s"
        if res.notes:  # a damaged cache entry was rebuilt
            state += f" ({'; '.join(res.notes)})"
        builds[spec] = f"{state}, key {res.key}" if res.ok else FAILED + res.first_error
    return builds


def run_limit(base: RunOptions, settings: RunSettings) -> float:
    """A child harness run's hard limit: the run's wall limit (its options', else its
    scenario's) and the margin for startup, sampling and the report."""
    return limits_for(base, settings).wall_s + MARGIN_S


def _one_target(
    target: Target, plan: Repeat, limit_s: float, progress: LiveProgress
) -> list[RunRow]:
    rows: dict[int, list[RunRow]] = {}
    try:
        done = progress_done(progress, plan.runs)
        with ChildRuns() as runner:
            run_rounds([target], {0: plan.runs}, rows, plan, runner, limit_s, done)
    except Interrupted as exc:
        raise RunsInterrupted(exc.signum, rows.get(0, []), target.folder) from None
    return rows.get(0, [])


def repeat_run(opts: RunOptions, plan: Repeat, out: Path) -> list[RunRow]:
    """`harness run ENV --repeat N`: the variant built once, then N child runs in `out`."""
    pin = load_pin(opts.pin or default_pin(opts.checkout))
    settings = load_scenario(opts.scenario or opts.env).settings(pin.lineage)
    check_env(pin, settings.upstream_env)
    check_available(opts.conditions)  # a quota this host cannot give: once, before any run
    store.check_report_dir(out.parent)
    try:
        built = build_each(opts, pin, [opts.variant], settings.upstream_env)[opts.variant]
        if built.startswith(FAILED):  # every run would fail the same way: say it once
            raise HarnessError(f"the build of {opts.variant} {built}", outcome.BUILD_FAILED)
        limit_s = run_limit(opts, settings)
        target = Target(out, run_argv(opts, opts.variant), {}, opts.variant)
        return _one_target(target, plan, limit_s, opts.progress)
    finally:
        opts.progress.close()


def repeat_watch(opts: WatchOptions, plan: Repeat, out: Path) -> list[RunRow]:
    """`harness watch --repeat N -- CMD`: N child watches of the command in `out`."""
    check_watch(opts)  # a missing command fails once, not once per run
    store.check_report_dir(out.parent)
    try:
        target = Target(out, watch_argv(opts))
        limit_s = opts.timeout_s + MARGIN_S
        return _one_target(target, plan, limit_s, opts.progress)
    finally:
        opts.progress.close()
