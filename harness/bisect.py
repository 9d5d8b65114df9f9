"""Bisect: find the first commit of an upstream's first-parent history that shows a failure,
testing each commit with the harness's own pipeline (prepare → cached build → run under the
watchdog → verdict).

`harness bisect ENV --good A --bad B` drives the search itself: it checks both ends, runs a
binary search that steps around untestable commits, and writes a report. `harness
bisect-step ENV` is the test for `git bisect run`: it runs the harness on the checkout's HEAD
and exits 0 (good), 1 (bad), 125 (skip) or 255 (abort). See docs/bisect.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harness import __version__, pipeline, upstream, variants
from harness.build import cache_root
from harness.config.pin import Pin, check_env, load_pin
from harness.config.scenario import load_scenario
from harness.errors import BISECT_SKIP, INTERRUPTED_BASE, USAGE, HarnessError, Interrupted
from harness.execute import runner
from harness.execute.watchdog import add_limit_options
from harness.process import tools
from harness.report import Report, atomic_write, new_run_id

SCHEMA_VERSION = 1
GOOD, BAD, SKIP = "good", "bad", "skip"
BISECT_ABORT = 255  # `git bisect run` stops on any exit code >= 128
GIT_TIMEOUT_S = 60.0
FAILURES = frozenset({"hang", "crash", "error-exit", "check-failed", "timeout-progressing"})
EXPECTS: dict[str, frozenset[str]] = {
    "hang": frozenset({"hang"}),
    "crash": frozenset({"crash", "error-exit"}),  # both are exit code 3
    "check-failed": frozenset({"check-failed"}),
    "any-failure": FAILURES,
}
# the same tree fails to build (or to prepare) the same way every time: repeating is useless
UNREPEATABLE = frozenset({"build-failed", "error"})
ROLES = ("good-end", "bad-end", "search", "confirm-fix", "step")


@dataclass
class BisectOptions:
    env: str
    good: str = ""
    bad: str = ""
    pin: str | None = None
    checkout: Path | None = None
    variant: str = "stock"
    scenario: str | None = None
    timeout_s: float | None = None
    startup_s: float | None = None
    stall_s: float | None = None
    steps: int | None = None
    trainer_env: dict[str, str] = field(default_factory=dict)
    trainer_args: list[str] = field(default_factory=list)
    expect: str = "hang"  # hang | crash | check-failed | any-failure
    location: str | None = None  # a bad step's verdict must be located here
    repeat: int = 1
    confirm_fix: str | None = None  # variant to run on the first bad commit
    report_dir: Path = Path("reports")
    sampling: runner.SampleOptions = field(default_factory=runner.SampleOptions)
    tee: bool = False
    harness_argv: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str
    date: str

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass
class RunRecord:
    """One harness run of one commit."""

    kind: str  # the verdict kind, or "error" when the harness could not prepare the tree
    summary: str
    exit_code: int
    classification: str  # good | bad | skip
    location: str | None = None
    mechanism: str | None = None
    location_frames: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    build_key: str | None = None
    build_ok: bool | None = None
    build_s: float | None = None
    cache_hit: bool | None = None
    run_s: float | None = None
    epochs: float | None = None
    sps: float | None = None
    report_dir: str | None = None


@dataclass
class StepRecord:
    """One tested commit: up to --repeat runs, classified together."""

    role: str  # good-end | bad-end | search | confirm-fix | step
    index: int  # position among the candidates, oldest 0; the good end is -1
    commit: CommitInfo
    variant: str
    classification: str
    runs: list[RunRecord]

    @property
    def decisive(self) -> RunRecord:
        """The run that decided the classification: the first bad one, else the last."""
        return next((r for r in self.runs if r.classification == BAD), self.runs[-1])

    def counts(self) -> dict[str, int]:
        tally = {c: sum(r.classification == c for r in self.runs) for c in (GOOD, BAD, SKIP)}
        return {"runs": len(self.runs), **tally}

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "index": self.index,
            "commit": asdict(self.commit),
            "variant": self.variant,
            "classification": self.classification,
            "counts": self.counts(),
            "verdict": asdict(self.decisive),
            "runs": [asdict(r) for r in self.runs],
        }


@dataclass
class Setup:
    """What every step shares, validated once before anything is built."""

    opts: BisectOptions
    pin: Pin
    root: Path


@dataclass
class BisectResult:
    run_id: str
    directory: Path
    setup: Setup
    good: CommitInfo
    bad: CommitInfo
    candidates: list[CommitInfo]  # good..bad on the first-parent line, oldest first
    steps: list[StepRecord] = field(default_factory=list)
    status: str = "running"  # running | found | range | failed | interrupted
    first_bad: StepRecord | None = None
    parent: StepRecord | None = None  # the last good step before the first bad commit
    possible: list[CommitInfo] = field(default_factory=list)  # status "range"
    diffstat: str = ""
    confirm: StepRecord | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def search_steps(self) -> list[StepRecord]:
        return [s for s in self.steps if s.role != "confirm-fix"]

    @property
    def runs(self) -> list[RunRecord]:
        return [r for s in self.steps for r in s.runs]

    @property
    def step_bound(self) -> int:
        """⌈log2 N⌉ + skips + 2 (the ends): the most steps the search may take."""
        skips = sum(s.classification == SKIP for s in self.search_steps)
        return (len(self.candidates) - 1).bit_length() + skips + 2

    @property
    def location_matched(self) -> bool | None:
        want = self.setup.opts.location
        if self.first_bad is None or want is None:
            return None
        return self.first_bad.decisive.location == want

    @property
    def fix_confirmed(self) -> bool | None:
        return None if self.confirm is None else self.confirm.classification == GOOD

    @property
    def exit_code(self) -> int:
        """0: a first bad commit was named (and the fix, if asked, passes on it); 1: not."""
        return 0 if self.status == "found" and self.fix_confirmed is not False else 1

    def totals(self) -> dict[str, int]:
        runs = self.runs
        built = [r for r in runs if r.build_key and not r.cache_hit]
        return {
            "steps": len(self.search_steps),
            "skips": sum(s.classification == SKIP for s in self.search_steps),
            "step_bound": self.step_bound,
            "runs": len(runs),
            "builds": len(built),
            "distinct_builds": len({r.build_key for r in runs if r.build_key}),
            "cache_hits": sum(bool(r.cache_hit) for r in runs),
            "build_failures": sum(r.kind == "build-failed" for r in runs),
        }

    def message(self) -> str:
        if self.error:
            return self.error
        if self.status == "found" and self.first_bad is not None:
            c = self.first_bad.commit
            return f"{c.sha} is the first bad commit: {c.subject}"
        if self.status == "range":
            listed = ", ".join(f"{c.short} {c.subject}" for c in self.possible)
            return f"the first bad commit could be any of: {listed}"
        return self.status

    def to_json(self) -> dict[str, Any]:
        opts = self.setup.opts
        end = self.finished or time.time()
        return {
            "schema_version": SCHEMA_VERSION,
            "harness_version": __version__,
            "mode": "bisect",
            "run_id": self.run_id,
            "status": self.status,
            "started_at": _iso(self.started),
            "finished_at": _iso(self.finished) if self.finished else None,
            "wall_s": round(end - self.started, 3),
            "harness_argv": opts.harness_argv,
            "env": opts.env,
            "pin": {"name": self.setup.pin.name, "file": str(self.setup.pin.file)},
            "checkout": str(self.setup.root),
            "scenario": opts.scenario or opts.env,
            "variant": opts.variant,
            "expect": opts.expect,
            "location": opts.location,
            "repeat": opts.repeat,
            "good": asdict(self.good),
            "bad": asdict(self.bad),
            "candidates": len(self.candidates),
            "steps": [s.to_json() for s in self.steps],
            "totals": self.totals(),
            "result": self._result_json(),
            "confirm_fix": self._confirm_json(),
            "error": self.error,
        }

    def _result_json(self) -> dict[str, Any]:
        return {
            "message": self.message(),
            "first_bad": asdict(self.first_bad.commit) if self.first_bad else None,
            "first_bad_run": asdict(self.first_bad.decisive) if self.first_bad else None,
            "parent": asdict(self.parent.commit) if self.parent else None,
            "parent_run": asdict(self.parent.decisive) if self.parent else None,
            "possible": [asdict(c) for c in self.possible],
            "location_matched": self.location_matched,
            "diffstat": self.diffstat,
        }

    def _confirm_json(self) -> dict[str, Any] | None:
        if self.confirm is None:
            return None
        return {
            "variant": self.confirm.variant,
            "confirmed": self.fix_confirmed,
            "step": self.confirm.to_json(),
        }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))


# ---------------------------------------------------------------- git


def _git(root: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tools.ToolResult:
    return upstream.git_result(root, *args, timeout=GIT_TIMEOUT_S, ok=ok)


def resolve(root: Path, rev: str) -> str:
    """The full hash of the commit `rev` names, or a usage error."""
    if not rev or rev.startswith("-"):
        raise HarnessError(f"not a revision: {rev!r}", USAGE)
    res = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", ok=(0, 1, 128))
    if res.returncode != 0:
        raise HarnessError(f"unknown revision {rev!r} in {root}", USAGE)
    return res.stdout.strip()


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    return _git(root, "merge-base", "--is-ancestor", older, newer, ok=(0, 1)).returncode == 0


_FORMAT = "--format=%H%x1f%s%x1f%an <%ae>%x1f%aI"


def _parse_log(text: str) -> list[CommitInfo]:
    return [CommitInfo(*line.split("\x1f", 3)) for line in text.splitlines() if line]


def commit_info(root: Path, sha: str) -> CommitInfo:
    return _parse_log(_git(root, "log", "-1", "--no-show-signature", _FORMAT, sha).stdout)[0]


def first_parent_range(root: Path, good: str, bad: str) -> list[CommitInfo]:
    """good..bad along bad's first parents, oldest first (merged branches count as one)."""
    args = ("log", "--first-parent", "--reverse", "--no-show-signature", _FORMAT)
    return _parse_log(_git(root, *args, f"{good}..{bad}").stdout)


def diffstat(root: Path, sha: str) -> str:
    # against the first parent: a merge's stat is what it brought into the line
    return _git(root, "diff", "--stat", f"{sha}^1", sha).stdout.rstrip()


def toplevel(path: Path) -> Path:
    upstream.open_repo(path)
    return Path(_git(path, "rev-parse", "--show-toplevel").stdout.strip())


# ---------------------------------------------------------------- testing one commit


def classify_run(kind: str, location: str | None, expect: str, want: str | None) -> str:
    """pass → good; the expected failure (at `want`, if given) → bad; anything else → skip:
    a build failure or an unrelated failure says nothing about the failure sought."""
    if kind == "pass":
        return GOOD
    if kind in EXPECTS[expect] and (want is None or location == want):
        return BAD
    return SKIP


def combine(runs: Sequence[RunRecord]) -> str:
    """Bad if any run showed the failure, good only if every run passed, else skip."""
    if any(r.classification == BAD for r in runs):
        return BAD
    if runs and all(r.classification == GOOD for r in runs):
        return GOOD
    return SKIP


def setup_for(opts: BisectOptions) -> Setup:
    """Validate everything that does not depend on the commit: an error here is the user's,
    not a property of some commit (so bisect-step aborts instead of skipping)."""
    if opts.expect not in EXPECTS:
        raise HarnessError(f"--expect must be one of {', '.join(EXPECTS)}, not {opts.expect!r}")
    if opts.repeat < 1:
        raise HarnessError(f"--repeat must be at least 1, not {opts.repeat}")
    scenario = load_scenario(opts.scenario or opts.env)
    pin = load_pin(opts.pin or pipeline.default_pin(opts.checkout))
    if pin.source.kind != "git":
        raise HarnessError(f"bisect needs a git pin; {pin.name} is a {pin.source.kind} source")
    check_env(pin, scenario.settings(pin.name).upstream_env)
    for spec in filter(None, (opts.variant, opts.confirm_fix)):
        variants.parse_variant(spec, pin)
    root = toplevel(upstream.locate_checkout(pin, opts.checkout))
    return Setup(opts, pin, root)


def _run_options(setup: Setup, sha: str, variant: str, report_dir: Path) -> pipeline.RunOptions:
    o = setup.opts
    return pipeline.RunOptions(
        env=o.env,
        pin=str(setup.pin.file),
        scenario=o.scenario,
        variant=variant,
        timeout_s=o.timeout_s,
        startup_s=o.startup_s,
        stall_s=o.stall_s,
        steps=o.steps,
        trainer_env=dict(o.trainer_env),
        trainer_args=list(o.trainer_args),
        report_dir=report_dir,
        checkout=setup.root,
        allow_drift=True,  # a commit's tree is identified by its hash, not the pin's hashes
        commit=sha,
        sampling=o.sampling,
        tee=o.tee,
        harness_argv=o.harness_argv,
    )


def _record(report: Report, code: int, opts: BisectOptions) -> RunRecord:
    v = report.verdict
    kind = v.kind if v else report.status
    location = v.location if v else None
    build = report.build or {}
    last = report.progress.get("last_metrics") or {}
    return RunRecord(
        kind=kind,
        summary=v.summary if v else "",
        exit_code=code,
        classification=classify_run(kind, location, opts.expect, opts.location),
        location=location,
        mechanism=v.mechanism if v else None,
        location_frames=list(v.location_frames) if v else [],
        evidence=list(v.evidence[:8]) if v else [],
        build_key=build.get("key"),
        build_ok=build.get("ok"),
        build_s=build.get("duration_s"),
        cache_hit=build.get("cache_hit"),
        run_s=report.timings.get("run_s"),
        epochs=last.get("epoch"),
        sps=last.get("SPS"),
        report_dir=str(report.directory),
    )


def run_once(setup: Setup, sha: str, variant: str, report_dir: Path) -> RunRecord:
    try:
        report, code = pipeline.run_env(_run_options(setup, sha, variant, report_dir))
    except HarnessError as exc:
        # setup_for validated everything global: what fails now is this commit's tree
        # (a variant that does not apply to it, a build tool it needs): untestable, skip
        return RunRecord("error", exc.message, exc.exit_code, SKIP)
    if code >= INTERRUPTED_BASE:
        raise Interrupted(code - INTERRUPTED_BASE)
    return _record(report, code, setup.opts)


def try_commit(
    setup: Setup, commit: CommitInfo, role: str, index: int, variant: str, report_dir: Path
) -> StepRecord:
    """Up to --repeat runs; stop at the first that shows the failure (bad is settled)."""
    runs: list[RunRecord] = []
    for _ in range(setup.opts.repeat):
        runs.append(run_once(setup, commit.sha, variant, report_dir))
        if runs[-1].classification == BAD or runs[-1].kind in UNREPEATABLE:
            break
    return StepRecord(role, index, commit, variant, combine(runs), runs)


# ---------------------------------------------------------------- the search


def _expected(opts: BisectOptions) -> str:
    what = "any failure" if opts.expect == "any-failure" else opts.expect
    return what + (f" in {opts.location}" if opts.location else "")


def _shown(step: StepRecord) -> str:
    r = step.decisive
    if r.summary.startswith(r.kind):  # verdict summaries mostly name their kind already
        return r.summary
    where = f" in {r.location}" if r.location else ""
    return f"{r.kind}{where}: {r.summary}" if r.summary else f"{r.kind}{where}"


def prepare(opts: BisectOptions) -> BisectResult:
    """Validate the options and the two ends; list the candidates. Nothing is built yet."""
    if not opts.good or not opts.bad:
        raise HarnessError("bisect needs both --good and --bad", USAGE)
    setup = setup_for(opts)
    root = setup.root
    good, bad = resolve(root, opts.good), resolve(root, opts.bad)
    if good == bad:
        raise HarnessError(f"--good and --bad are the same commit {good[:12]}: nothing to bisect")
    if not is_ancestor(root, good, bad):
        if is_ancestor(root, bad, good):
            raise HarnessError(
                f"--good and --bad are reversed: the bad end {bad[:12]} is an ancestor of the "
                f"good end {good[:12]} (swap --good and --bad)"
            )
        raise HarnessError(
            f"the good end {good[:12]} is not an ancestor of the bad end {bad[:12]}: "
            "there is no single history between them"
        )
    candidates = first_parent_range(root, good, bad)
    run_id = new_run_id(f"bisect-{opts.env}")
    return BisectResult(
        run_id, opts.report_dir / run_id, setup, commit_info(root, good), candidates[-1], candidates
    )


class _Search:
    def __init__(self, result: BisectResult) -> None:
        self.result = result
        self.setup = result.setup
        self.tested: dict[int, StepRecord] = {}

    def test(self, index: int, role: str) -> StepRecord:
        res = self.result
        commit = res.good if index < 0 else res.candidates[index]
        step = try_commit(
            self.setup, commit, role, index, self.setup.opts.variant, res.directory / "steps"
        )
        res.steps.append(step)
        self.tested[index] = step
        save(res)
        return step

    def check_ends(self) -> None:
        """The bad end first: if the failure does not reproduce there, nothing else matters."""
        res, opts = self.result, self.setup.opts
        bad = self.test(len(res.candidates) - 1, "bad-end")
        if bad.classification == GOOD:
            raise HarnessError(f"the bad end {res.bad.short} passed: nothing to bisect", USAGE)
        if bad.classification == SKIP:
            raise HarnessError(
                f"the bad end {res.bad.short} does not show the expected failure "
                f"({_expected(opts)}): it showed {_shown(bad)}",
                USAGE,
            )
        good = self.test(-1, "good-end")
        if good.classification == BAD:
            raise HarnessError(
                f"the good end {res.good.short} shows the failure ({_shown(good)}): "
                "pick an older --good",
                USAGE,
            )
        if good.classification == SKIP:
            raise HarnessError(
                f"the good end {res.good.short} is not good: it showed {_shown(good)}", USAGE
            )

    def search(self) -> None:
        """Binary search over the candidates with skips. Invariant: `lo` is good (-1: the good
        end), `hi` bad. Each probe is the median of the untested, unskipped candidates, so
        a skip moves the next probe to the nearest neighbour, alternately on either side,
        and a decisive probe halves the commits left: ⌈log2 N⌉ decisive probes at most."""
        lo, hi = -1, len(self.result.candidates) - 1
        skipped: set[int] = set()
        while pool := [i for i in range(lo + 1, hi) if i not in skipped]:
            probe = pool[(len(pool) + 1) // 2 - 1]
            cls = self.test(probe, "search").classification
            if cls == BAD:
                hi = probe
            elif cls == GOOD:
                lo = probe
            else:
                skipped.add(probe)
        self.conclude(lo, hi, sorted(i for i in skipped if lo < i < hi))

    def conclude(self, lo: int, hi: int, skipped: list[int]) -> None:
        res = self.result
        if skipped:  # untestable commits hide where the failure came in: a range, like git
            res.status = "range"
            res.possible = [res.candidates[i] for i in [*skipped, hi]]
            return
        res.status = "found"
        res.first_bad, res.parent = self.tested[hi], self.tested[lo]
        res.diffstat = diffstat(self.setup.root, res.first_bad.commit.sha)

    def confirm(self, variant: str) -> None:
        res = self.result
        assert res.first_bad is not None
        bad = res.first_bad
        step = try_commit(
            self.setup, bad.commit, "confirm-fix", bad.index, variant, res.directory / "steps"
        )
        res.steps.append(step)
        res.confirm = step
        save(res)


def bisect(opts: BisectOptions) -> BisectResult:
    """Find the first bad commit between opts.good and opts.bad (see the module doc)."""
    result = prepare(opts)
    save(result)
    search = _Search(result)
    try:
        search.check_ends()
        search.search()
        if opts.confirm_fix and result.first_bad is not None:
            search.confirm(opts.confirm_fix)
    except HarnessError as exc:
        result.error = exc.message
        finish(result, "failed")
        raise
    except (Interrupted, KeyboardInterrupt):
        finish(result, "interrupted")
        raise
    finish(result, result.status)
    return result


def bisect_step(opts: BisectOptions) -> int:
    """`git bisect run harness bisect-step ENV …`: test the checkout's HEAD (the checkout is
    --checkout, else the current folder). 0 good, 1 bad, 125 skip, 255 abort (a usage error:
    it would be wrong to call every commit bad because of a typo)."""
    checkout = opts.checkout or Path.cwd()
    try:
        setup = setup_for(replace(opts, checkout=checkout))
        head = commit_info(setup.root, resolve(setup.root, "HEAD"))
    except HarnessError as exc:
        print(f"harness bisect-step: error: {exc.message} (aborting)", file=sys.stderr)
        return BISECT_ABORT
    report_dir = opts.report_dir
    step = try_commit(setup, head, "step", 0, opts.variant, report_dir)
    code = {GOOD: 0, BAD: 1, SKIP: BISECT_SKIP}[step.classification]
    counts = step.counts()
    print(
        f"harness bisect-step: {head.short} {head.subject}: {_shown(step)} → "
        f"{step.classification} (exit {code}; runs {counts['runs']}, bad {counts[BAD]}, "
        f"good {counts[GOOD]}, skip {counts[SKIP]}; report {step.decisive.report_dir})",
        file=sys.stderr,
    )
    return code


# ---------------------------------------------------------------- reports


def save(result: BisectResult) -> None:
    """report.json, rewritten (atomically) after every step: a dead bisect leaves its trail."""
    atomic_write(result.directory / "report.json", json.dumps(result.to_json(), indent=2) + "\n")


def finish(result: BisectResult, status: str) -> None:
    result.status = status
    result.finished = time.time()
    atomic_write(result.directory / "report.md", render_markdown(result))
    save(result)


def _cell(text: object) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _build_text(r: RunRecord) -> str:
    if r.build_key is None:
        return "-"
    state = "cache hit" if r.cache_hit else f"built in {r.build_s or 0:.1f}s"
    return state if r.build_ok is not False else f"FAILED ({state})"


def side_by_side(result: BisectResult) -> list[tuple[str, str, str]]:
    """(field, parent's passing run, first bad commit's run) rows."""
    assert result.first_bad is not None and result.parent is not None
    p, b = result.parent.decisive, result.first_bad.decisive
    pc, bc = result.parent.commit, result.first_bad.commit

    def metrics(r: RunRecord) -> str:
        return f"epoch {r.epochs if r.epochs is not None else '-'}, SPS {r.sps or '-'}"

    return [
        ("commit", f"{pc.short} {pc.subject}", f"{bc.short} {bc.subject}"),
        ("verdict", p.kind, b.kind),
        ("summary", p.summary, b.summary),
        ("mechanism", p.mechanism or "-", b.mechanism or "-"),
        ("location", p.location or "-", b.location or "-"),
        ("frames", " → ".join(p.location_frames) or "-", " → ".join(b.location_frames) or "-"),
        ("progress", metrics(p), metrics(b)),
        (
            "run",
            f"{p.run_s or 0:.1f}s, exit {p.exit_code}",
            f"{b.run_s or 0:.1f}s, exit {b.exit_code}",
        ),
        ("build", _build_text(p), _build_text(b)),
        ("runs (bad/good/skip)", _counts_text(result.parent), _counts_text(result.first_bad)),
        ("report", p.report_dir or "-", b.report_dir or "-"),
    ]


def _counts_text(step: StepRecord) -> str:
    c = step.counts()
    return f"{c['runs']} ({c[BAD]}/{c[GOOD]}/{c[SKIP]})"


def _md_result(result: BisectResult) -> list[str]:
    opts = result.setup.opts
    lines = [f"**{result.message()}**", "", f"- expected: {_expected(opts)}"]
    if result.first_bad is not None:
        c = result.first_bad.commit
        lines += [f"- author: {c.author}, {c.date}"]
        if result.location_matched is not None:
            lines.append(f"- --location {opts.location} matched: {result.location_matched}")
        if result.confirm is not None:
            verdict = "passes" if result.fix_confirmed else "does not pass"
            lines.append(
                f"- fix `{result.confirm.variant}` on {c.short}: {verdict} "
                f"({_shown(result.confirm)})"
            )
        lines += ["", "| | parent (last good) | first bad |", "|---|---|---|"]
        lines += [f"| {k} | {_cell(a)} | {_cell(b)} |" for k, a, b in side_by_side(result)]
        lines += ["", "## Evidence (first bad)", ""]
        lines += [f"- {e}" for e in result.first_bad.decisive.evidence]
        lines += ["", "## Diff stat", "", "```", result.diffstat, "```"]
    return lines


def render_markdown(result: BisectResult) -> str:
    opts, totals = result.setup.opts, result.totals()
    lines = [
        f"# harness bisect: {opts.env} ({result.setup.pin.name})",
        "",
        f"{result.good.short}..{result.bad.short}: {len(result.candidates)} commits on the "
        f"first-parent line, variant {opts.variant}, repeat {opts.repeat}; status {result.status}",
        "",
        *_md_result(result),
        "",
        "## Steps",
        "",
        "| # | role | commit | subject | verdict | location | class | runs (bad/good/skip) "
        "| build | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, s in enumerate(result.steps, 1):
        r = s.decisive
        lines.append(
            f"| {n} | {s.role} | {s.commit.short} | {_cell(s.commit.subject)} | {r.kind} "
            f"| {r.location or '-'} | {s.classification} | {_counts_text(s)} "
            f"| {_build_text(r)} | {r.run_s or 0:.1f}s |"
        )
    lines += ["", "## Totals", ""] + [f"- {k}: {v}" for k, v in totals.items()]
    return "\n".join(lines) + "\n"


def print_summary(result: BisectResult, stream: TextIO | None = None) -> None:
    """One screen: the answer, the side-by-side runs, the step count, the report folder."""
    console = Console(file=stream, highlight=False, soft_wrap=False)
    totals = result.totals()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    style = {"found": "bold green", "range": "bold yellow"}.get(result.status, "bold red")
    grid.add_row("result", f"[{style}]{escape(result.message())}[/]")
    grid.add_row("expected", _expected(result.setup.opts))
    if result.first_bad is not None:
        c = result.first_bad.commit
        grid.add_row("author", escape(f"{c.author}, {c.date}"))
        if result.location_matched is not None:
            grid.add_row("location", f"matched: {result.location_matched}")
        if result.confirm is not None:
            ok = "[green]passes[/]" if result.fix_confirmed else "[red]does not pass[/]"
            grid.add_row("fix", f"{escape(result.confirm.variant)}: {ok}")
    grid.add_row(
        "cost",
        f"{totals['steps']} steps (bound {totals['step_bound']}), {totals['runs']} runs, "
        f"{totals['builds']} builds, {totals['cache_hits']} cache hits, {totals['skips']} skips",
    )
    grid.add_row("report", escape(str(result.directory)))
    console.print(
        Panel(grid, title=escape(f"harness bisect: {result.setup.opts.env}"), expand=False)
    )
    if result.first_bad is not None:
        table = Table("", "parent (last good)", "first bad", expand=False)
        for key, a, b in side_by_side(result):
            if key != "report":
                table.add_row(escape(key), escape(a), escape(b))
        console.print(table)
        console.print(result.diffstat, markup=False)


# ---------------------------------------------------------------- command line


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


class _StepParser(argparse.ArgumentParser):
    """bisect-step's own usage errors exit 255: under `git bisect run` any code from 1 to 127
    would mark the commit bad, and a typo would then "find" a first bad commit."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"harness bisect-step: error: {message}", file=sys.stderr)
        sys.exit(BISECT_ABORT)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # unknown options would otherwise reach the top-level parser, whose error code
        # (5, or argparse's 2) git would read as "bad"
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", help="env / scenario name (scenarios/<env>.toml)")
    p.add_argument("--pin", help="git pin name or .toml path (default: pufferlib-5.0)")
    p.add_argument("--checkout", type=Path, help="the upstream git checkout")
    p.add_argument("--scenario", help="scenario name or path (default: the env's)")
    p.add_argument("--variant", default="stock", help="variant built at every step")
    p.add_argument("--steps", type=int, help="total timesteps for the trainer")
    add_limit_options(p, per=" per run")
    runner.add_trainer_options(p, "trainer")
    p.add_argument(
        "--expect",
        choices=list(EXPECTS),
        default="hang",
        help="the failure that makes a commit bad (default: hang)",
    )
    p.add_argument("--location", help="a bad commit's verdict must be located here (env_start)")
    p.add_argument(
        "--repeat",
        type=_at_least_one,
        default=1,
        help="runs per commit: bad if any shows the failure, good only if all pass",
    )
    p.add_argument("--tee", action="store_true", help="show the trainer's output live (stderr)")


def add_parsers(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `bisect` and `bisect-step` to the CLI's subparsers."""
    p = sub.add_parser("bisect", help="find the first bad commit between --good and --bad")
    _add_common(p)
    p.add_argument("--good", required=True, help="a commit that passes")
    p.add_argument("--bad", required=True, help="a later commit that shows the failure")
    p.add_argument("--confirm-fix", metavar="VARIANT", help="also run this variant on the answer")
    p.add_argument("--report-dir", type=Path, default=Path("reports"))
    p.add_argument("--json", action="store_true", help="print report.json on stdout")
    saved = sub._parser_class
    sub._parser_class = _StepParser  # its own usage errors must abort git bisect run
    try:
        s = sub.add_parser("bisect-step", help="test HEAD for `git bisect run` (0/1/125)")
    finally:
        sub._parser_class = saved
    _add_common(s)
    s.add_argument(
        "--report-dir",
        type=Path,
        default=None,
        help="default: <harness cache>/reports (never inside the checkout being bisected)",
    )


def options_from_args(args: argparse.Namespace) -> BisectOptions:
    report_dir = args.report_dir or cache_root() / "reports"
    return BisectOptions(
        env=args.env,
        good=getattr(args, "good", "") or "",
        bad=getattr(args, "bad", "") or "",
        pin=args.pin,
        checkout=args.checkout,
        variant=args.variant,
        scenario=args.scenario,
        timeout_s=args.timeout,
        startup_s=args.startup,
        stall_s=args.stall,
        steps=args.steps,
        trainer_env=pipeline.parse_trainer_env(args.env_vars),
        trainer_args=list(args.trainer_args),
        expect=args.expect,
        location=args.location,
        repeat=args.repeat,
        confirm_fix=getattr(args, "confirm_fix", None),
        report_dir=report_dir,
        tee=args.tee,
        harness_argv=list(sys.argv),
    )


def cmd_bisect(args: argparse.Namespace) -> int:
    result = bisect(options_from_args(args))
    print_summary(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    return result.exit_code


def cmd_bisect_step(args: argparse.Namespace) -> int:
    try:
        opts = options_from_args(args)
    except HarnessError as exc:  # e.g. a malformed --env: the user's error, abort
        print(f"harness bisect-step: error: {exc.message} (aborting)", file=sys.stderr)
        return BISECT_ABORT
    try:
        return bisect_step(opts)
    except Exception:  # a harness bug must stop git bisect run, not mark the commit bad
        traceback.print_exc()
        print("harness bisect-step: internal error (aborting)", file=sys.stderr)
        return BISECT_ABORT


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "bisect": cmd_bisect,
    "bisect-step": cmd_bisect_step,
}


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.bisect …` is the harness CLI (one set of error and signal rules)."""
    from harness.cli import main as cli_main  # lazy: the CLI imports this module

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
