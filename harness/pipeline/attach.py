"""`harness attach PID`: diagnose a tree that is running now, started by someone else. It
watches for up to `duration_s` (stopping early once the tree is quiescent by the rule of
`run`), samples stacks (or /proc only where tracing is refused), classifies, runs the causes
and writes the same report folder as `run`/`watch`, mode "attach". The target is never
stopped or signalled, except by --kill, after the report.

`diagnose_tree` is the part the pytest plugin's watcher shares: from an Observer at a
trigger to a finished verdict in a report (harness/pytest_plugin/watcher.py).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness.analysis import classify
from harness.analysis.causes import checked_rules
from harness.config.signatures import load_signatures
from harness.doctor.fingerprint import take_fingerprint
from harness.errors import HarnessError
from harness.execute.attach import (
    Observer,
    kill_tree,
    ptrace_refusal,
    tree_pids,
    tree_written,
    visible,
    written_since,
)
from harness.execute.runner import SampleOptions
from harness.outcome import USAGE, Kind
from harness.pipeline.diagnose import diagnose
from harness.pipeline.run import finishing
from harness.report import store
from harness.report.live import LiveProgress
from harness.report.model import Cleanup, CommandInfo, ExitInfo, Report
from harness.vocab import Need, Phase, RunMode, RunStatus, Stage, Trigger
from harness.watch.closedwatch import closed_words
from harness.watch.watchdog import DEFAULT_QUIESCENT_S, Limits

DEFAULT_DURATION_S = 10.0


@dataclass(frozen=True)
class AttachOptions:
    pid: int
    duration_s: float = DEFAULT_DURATION_S
    quiescent_s: float = DEFAULT_QUIESCENT_S
    report_dir: Path = Path("reports")
    sampling: SampleOptions = field(default_factory=SampleOptions)
    kill: bool = False
    harness_argv: list[str] = field(default_factory=list)
    progress: LiveProgress = field(default_factory=LiveProgress.off, compare=False, repr=False)


def check_target(pid: int) -> psutil.Process:
    """The process to attach to, or a one-line usage error."""
    if pid <= 0:
        raise HarnessError(f"not a process id: {pid}", USAGE)
    if not visible(pid):
        raise HarnessError(
            f"pid {pid} is not visible here: no such process in this PID namespace (a "
            "process of another container or PID namespace is out of scope; run the "
            "harness inside it)",
            USAGE,
        )
    tgid = _tgid(pid)
    if tgid is not None and tgid != pid:  # /proc/TID exists for every thread, hidden or not
        raise HarnessError(
            f"pid {pid} is a thread of pid {tgid}, not a process: harness attach {tgid}", USAGE
        )
    me = psutil.Process()
    mine = {me.pid, *(p.pid for p in me.parents())}
    if pid in mine:
        raise HarnessError(f"pid {pid} is the harness itself or its ancestor", USAGE)
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise HarnessError(f"pid {pid} has exited (a zombie its parent has not reaped)", USAGE)
    except psutil.NoSuchProcess:
        raise HarnessError(f"pid {pid} is gone", USAGE) from None
    return proc


def _tgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def describe_target(proc: psutil.Process) -> CommandInfo:
    """What runs there, as far as /proc says (another user's cwd may be unreadable)."""
    try:
        argv = proc.cmdline() or [proc.name()]
    except psutil.Error:
        argv = [f"pid {proc.pid}"]
    try:
        cwd = proc.cwd()
    except psutil.Error:
        cwd = ""
    return CommandInfo(argv=argv, cwd=cwd)


def start_report(
    report_dir: Path, label: str, mode: RunMode, harness_argv: list[str], proc: psutil.Process
) -> Report:
    store.check_report_dir(report_dir)
    run_id = store.new_run_id(label)
    report = Report(run_id, report_dir / run_id, list(harness_argv), mode).claim()
    report.command = describe_target(proc)
    report.host = take_fingerprint(dict(os.environ), None)
    return report


def diagnose_tree(
    report: Report,
    obs: Observer,
    trigger: Trigger,
    reason: str,
    sampling: SampleOptions,
    refusal: str | None,
) -> bool:
    """Sample the tree now and put the verdict and its causes in `report`. A quiescent
    trigger is confirmed after the dump: False (nothing recorded) when the tree moved."""
    samples = obs.sample(sampling, refusal) if sampling.enabled else None
    if trigger in (Trigger.QUIESCENT, Trigger.CLOSED) and samples is not None:
        quiet = trigger is Trigger.QUIESCENT
        why = obs.confirm(samples) if quiet else obs.confirm_closed()
        if why is not None:
            what = "quiescence" if quiet else "the closed set"
            obs.loop.notes.append(f"{what} not confirmed after the stack dump: {why}")
            obs.reset()
            return False
    if samples is not None:
        obs.finish(samples)
    report.trigger = trigger
    report.samples = samples
    report.timings.run_s = obs.loop.recent[-1][0].t if obs.loop.recent else 0.0
    report.exit = ExitInfo(reason=reason, pid=obs.pid)
    report.verdict = classify.classify(trigger, reason, None, False, samples, [], load_signatures())
    diagnose(report, None)
    seen = {c.id for c in report.verdict.causes}
    # the causes whose detectors read the run's history from its start
    history = [c.rule.id for c in checked_rules() if Need.HISTORY in c.detector.needs]
    unseen = [c for c in history if c not in seen]
    if unseen:
        report.notes.append(
            "attached after the start: causes that rest on a fork or a death before the "
            f"first look ({', '.join(unseen)}) were judged on what was seen since"
        )
    return True


def attach_command(opts: AttachOptions) -> tuple[Report, int]:
    proc = check_target(opts.pid)
    name = os.path.basename(describe_target(proc).argv[0]) or "process"
    report = start_report(
        opts.report_dir, f"attach-{name}", RunMode.ATTACH, opts.harness_argv, proc
    )
    report.limits = Limits(opts.duration_s, opts.duration_s, opts.duration_s, opts.quiescent_s)
    try:
        with finishing(report):
            store.save(report, Stage.RUN)
            opts.progress.phase(Phase.ATTACH, f"pid {opts.pid}")
            seen = _watch(opts, report)
            if opts.kill:
                killed = kill_tree(opts.pid, seen)
                report.cleanup = Cleanup(killed=killed.killed, leftover=killed.leftover)
                report.notes.append(f"--kill: SIGKILL sent to {len(killed.killed)} processes")
            store.finish(report, RunStatus.COMPLETE)
    finally:
        opts.progress.close()
    assert report.verdict is not None
    return report, report.verdict.exit_code


def _watch(opts: AttachOptions, report: Report) -> list[psutil.Process]:
    """Watch and judge into `report`; the processes seen in the tree."""
    refusal = ptrace_refusal(opts.pid)
    if refusal is not None:
        report.notes.append(f"/proc only: {refusal}")
        print(f"harness attach: {refusal}", file=sys.stderr)
    obs = Observer(opts.pid, opts.quiescent_s)
    obs.watch_group()
    written = tree_written(tree_pids(opts.pid))
    try:
        while True:
            what = obs.wait_quiescent(opts.duration_s)
            if what is Trigger.EXIT:
                report.trigger = Trigger.EXIT
                report.exit = ExitInfo(reason="exited while watched", pid=opts.pid)
                report.verdict = classify.Verdict(
                    Kind.EXITED,
                    f"pid {opts.pid} exited while watched (its exit status is its parent's)",
                    evidence=[f"pid {opts.pid} vanished after {obs.loop.snapshots} looks"],
                )
                break
            if what is Trigger.QUIESCENT:
                reason = f"every thread blocked on the tree for {opts.quiescent_s:g}s"
                if diagnose_tree(report, obs, Trigger.QUIESCENT, reason, opts.sampling, refusal):
                    break
                continue  # it moved after all: watch on, within the duration
            if what is Trigger.CLOSED:
                members = closed_words(obs.loop.closed_members)
                reason = f"{members}: nothing outside the set could wake it (a closed set)"
                if diagnose_tree(report, obs, Trigger.CLOSED, reason, opts.sampling, refusal):
                    break
                continue
            grew = written_since(written, tree_written(tree_pids(opts.pid)))
            if grew:
                report.trigger = Trigger.DURATION
                report.exit = ExitInfo(reason="attach window ended", pid=opts.pid)
                report.verdict = classify.Verdict(
                    Kind.TIMEOUT_PROGRESSING,
                    f"no hang seen: the tree wrote {grew} bytes in the {opts.duration_s:g}s "
                    "window and was never quiescent",
                    evidence=[f"/proc/PID/io wchar of the tree grew by {grew} bytes"],
                )
                break
            reason = (
                f"not quiescent within the {opts.duration_s:g}s window and "
                + ("wrote nothing" if grew == 0 else "its writes are unreadable")
                + (": judged from /proc (no stacks)" if refusal else ": judged from the stacks")
            )
            diagnose_tree(report, obs, Trigger.DURATION, reason, opts.sampling, refusal)
            break
    finally:
        obs.close()
    return list(obs.seen.values())
