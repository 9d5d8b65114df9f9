"""Launch a command in its own session, tee its output to a log, parse progress live,
and let the watchdog decide when to stop it; sample the tree on suspicion; always kill
and reap the whole tree before returning."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import psutil

from harness import dashboard
from harness.config.hostprofile import parse_cpu_list
from harness.dashboard.registry import Parser
from harness.errors import HarnessError, Interrupted
from harness.execute import conditions as host
from harness.execute.load import NoisyNeighbour
from harness.execute.output import OutputPump
from harness.files import write_failure
from harness.process import proctree, reaper
from harness.sampling.model import SampleSet, Snapshot
from harness.sampling.sample import sample_tree
from harness.vocab import AUTO, Phase
from harness.watch import attrigger
from harness.watch.closedwatch import closed_words
from harness.watch.watchdog import Limits, Pause, Trigger, Watchdog, pause_threshold
from harness.watch.watchloop import WATCH_INTERVAL_S, WatchLoop

POLL_S = 0.1
# CLOCK_BOOTTIME counts a suspend of the machine, which CLOCK_MONOTONIC (the watchdog's
# clock) does not: read beside it only to note a suspend (harness/watch/watchdog.py)
_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _boottime() -> float | None:
    return None if _BOOTTIME is None else time.clock_gettime(_BOOTTIME)


@dataclass(frozen=True)
class RunSpec:
    argv: list[str]
    cwd: Path
    env: Mapping[str, str]  # the complete environment of the command
    parser: str  # a dashboard parser name; "lines" = every output line is progress
    log_path: Path
    # the CPUs, quota, memory limit and noisy neighbour the trainer runs under (its env
    # presets are already in `env`: the pipeline puts them there, under the trainer's --env)
    conditions: host.HostConditions = field(default_factory=host.HostConditions)


@dataclass(frozen=True)
class SampleOptions:
    enabled: bool = True
    snapshots: int = 3
    interval_s: float = 0.5
    stack_timeout_s: float = 10.0
    native: str = AUTO
    python: str = AUTO
    own_roots: tuple[str, ...] = ()


@dataclass
class RunOutcome:
    trigger: Trigger
    reason: str
    returncode: int | None  # None when the harness killed it
    pid: int
    started_at: float  # wall-clock epoch seconds
    duration_s: float
    first_progress_s: float | None
    progress_events: int
    progressing_at_end: bool
    frames: list[dashboard.MetricsFrame]
    output_tail: list[str]
    output_lines: int
    samples: SampleSet | None
    sampling_s: float
    cleanup: proctree.KillReport
    interrupt_signal: int | None = None
    # output the parser skipped to keep up with a flood, and frames beyond the kept ones
    unparsed_lines: int = 0
    frames_total: int = 0
    # degradations of the run itself, one line each, for the report (the execution layer
    # never prints: the report and the summary say it); a pause of the harness is one
    notes: list[str] = field(default_factory=list)
    # time the harness did not see (stopped, starved, suspended): the first MAX_PAUSES
    pauses: list[Pause] = field(default_factory=list)
    # how each host condition was applied, one line each ("cpus 0 (sched_setaffinity …)")
    conditions_applied: list[str] = field(default_factory=list)
    # the CPUs the trainer was allowed right after its exec (/proc/PID/status); None: unread
    affinity: list[int] | None = None

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


def _launch(
    spec: RunSpec, guard: reaper.Reaper | None = None, applied: host.Applied | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start the command in its own session, through the PR_SET_PDEATHSIG wrapper (the
    kernel SIGKILLs it if the harness dies; it also sets the host conditions of `applied`
    before the exec), and tell `guard`, the reaper, its pid and the cookie in its
    environment (how the reaper finds descendants whose ancestry is lost)."""
    applied = applied or host.Applied()
    cookie = reaper.new_cookie()
    read_fd, write_fd = os.pipe()
    status_r, status_w = os.pipe()  # the wrapper's exec errno, or EOF once it exec'd
    try:
        proc = subprocess.Popen(
            [*applied.prefix, *reaper.pdeathsig_argv(spec.argv, status_w, applied.wrapper)],
            cwd=spec.cwd,
            env={**spec.env, reaper.COOKIE_VAR: cookie},
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
            pass_fds=(status_w,),
        )
    except BaseException:
        for fd in (read_fd, status_r):
            os.close(fd)
        if guard is not None:
            guard.release()
        raise
    finally:
        os.close(write_fd)
        os.close(status_w)
    if guard is not None:
        guard.watch(proc.pid, cookie)
    try:
        failure = reaper.exec_failure(status_r)
    except BaseException:  # interrupted while the wrapper starts: kill it before raising
        proctree.kill_tree(proc, proc.pid)
        os.close(read_fd)
        if guard is not None:
            guard.release()
        raise
    finally:
        os.close(status_r)
    if failure is None:
        return proc, read_fd
    proc.wait()
    os.close(read_fd)
    if guard is not None:
        guard.release()
    errno_, what = failure
    if what != "exec":  # a host condition the kernel refused (a cpu offline since the check)
        raise HarnessError(f"cannot apply {what} to {spec.argv[0]}: {os.strerror(errno_)}")
    if errno_ == errno.ENOENT:
        raise HarnessError(f"command not found: {spec.argv[0]} ({os.strerror(errno_)})")
    if errno_ == errno.EACCES:
        raise HarnessError(f"command not executable: {spec.argv[0]}")
    raise HarnessError(f"cannot run {spec.argv[0]}: {os.strerror(errno_)}")


def _affinity(pid: int) -> list[int] | None:
    """The CPUs `pid` may run on, as the kernel says (Cpus_allowed_list)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return list(parse_cpu_list(line.split(":", 1)[1].strip()))
    except (OSError, ValueError):
        pass
    return None


def _remember(pids: list[int], seen: dict[int, psutil.Process]) -> None:
    """Processes of the tree the watch loop saw born: killed at the end, even if they left."""
    for pid in pids:
        if pid not in seen:
            with contextlib.suppress(psutil.Error):
                seen[pid] = psutil.Process(pid)


def _output_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _sample(
    pid: int, sampling: SampleOptions, watch: WatchLoop, start: float
) -> tuple[SampleSet, float]:
    """Stacks at once, CPU activity from the watch loop's recent history."""
    t0 = time.monotonic()
    samples = sample_tree(
        pid,
        snapshots=sampling.snapshots,
        interval=sampling.interval_s,
        stack_timeout=sampling.stack_timeout_s,
        native=sampling.native,
        python=sampling.python,
        own_roots=sampling.own_roots,
        history=watch.recent_window(),
        origin=start,
    )
    return samples, time.monotonic() - t0


@dataclass(frozen=True)
class Tick:
    """How a run is going, for live progress (about twice a second)."""

    elapsed_s: float
    window: Trigger  # the watchdog window counting now: STARTUP or STALL
    remaining_s: float  # seconds left in it
    frames: int  # dashboard frames (or output lines, for the lines parser) so far
    metrics: dict[str, float]  # the newest frame's values
    cpu_percent: float | None  # the tree's CPU use over the last second (100 = one core)
    phase: Phase = Phase.RUN  # RUN or SAMPLING


TICK_S = 0.5


def _tree_cpu(watch: WatchLoop) -> float | None:
    snaps = watch.recent_window(1.0)
    if len(snaps) < 2 or snaps[-1].t <= snaps[0].t:
        return None

    def total(snap: Snapshot) -> float:
        return sum(t.cpu_time for p in snap.processes for t in p.threads)

    # threads that ended between the two looks take their CPU with them: never below 0
    return max(0.0, (total(snaps[-1]) - total(snaps[0])) / (snaps[-1].t - snaps[0].t) * 100)


def run_watched(
    spec: RunSpec,
    limits: Limits,
    sampling: SampleOptions,
    on_started: Callable[[int], None] | None = None,
    echo: TextIO | None = None,
    on_tick: Callable[[Tick], None] | None = None,
) -> RunOutcome:
    """Run `spec` to completion or until the watchdog fires; never leaves a process behind."""
    proctree.become_subreaper()
    try:  # a disk that filled up during the build: one line, before anything is started
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        spec.log_path.write_bytes(b"")
    except OSError as exc:
        raise HarnessError(f"cannot create {spec.log_path}: {write_failure(exc)}") from None
    try:
        parser = dashboard.get_parser(spec.parser)  # before launch: nothing to clean up yet
    except ValueError as exc:
        raise HarnessError(str(exc)) from exc
    if not spec.cwd.is_dir():
        raise HarnessError(f"working directory {spec.cwd} does not exist")
    applied = host.prepare(spec.conditions)  # a leaf cgroup: removed on every path below
    try:
        # before the trainer, so that it starts on busy CPUs; stopped on every path (and by
        # PR_SET_PDEATHSIG if the harness dies)
        with NoisyNeighbour.start(spec.conditions.load, spec.conditions.cpus) as load:
            outcome = _watched(spec, limits, sampling, parser, applied, on_started, echo, on_tick)
    finally:
        applied.cleanup()
    outcome.conditions_applied = [*applied.lines, *([load.line] if load.line else [])]
    want = spec.conditions.cpus
    if want is not None and outcome.affinity is not None and tuple(outcome.affinity) != want:
        outcome.notes.append(f"the trainer got CPUs {outcome.affinity}, not {list(want)}")
    return outcome


def _watched(
    spec: RunSpec,
    limits: Limits,
    sampling: SampleOptions,
    parser: Parser,
    applied: host.Applied,
    on_started: Callable[[int], None] | None,
    echo: TextIO | None,
    on_tick: Callable[[Tick], None] | None,
) -> RunOutcome:
    guard = reaper.start()  # before `before`: the reaper is ours, not an adopted orphan
    before = {p.pid for p in proctree.descendants(os.getpid())}
    wall_start = time.time()
    proc, read_fd = _launch(spec, guard, applied)
    start = time.monotonic()
    affinity = _affinity(proc.pid)  # right after the exec, before the trainer can change it
    # a look far later than the watch loop's cadence is a pause of the harness
    dog = Watchdog(limits, start, pause_after_s=pause_threshold(WATCH_INTERVAL_S))
    seen: dict[int, psutil.Process] = {}
    samples: SampleSet | None = None
    sampling_s = 0.0
    trigger = Trigger.EXIT
    reason = "exited"
    progressing = False
    interrupt_signal: int | None = None
    # from the launch on, every path (a signal during the set-up below included) goes
    # through the `finally` that kills the tree and the outcome that records its pid
    pump: OutputPump | None = None
    watch: WatchLoop | None = None
    try:
        pump = OutputPump(read_fd, spec.log_path, parser, echo)
        pump.start()
        dog.resync(start, _boottime())
        watch = WatchLoop(proc.pid, start, quiescence=limits.quiescent_s > 0)
        watch.limit_at = start + limits.wall_s  # the wall fires then, pauses included
        # this process's children before the launch (the reaper, a load): any other child
        # of ours was adopted from the run (we are its subreaper) and is watched
        watch.tree.own = set(before)
        if on_started is not None:
            on_started(proc.pid)
        output_size, output_at = 0, None
        next_tick = start
        while True:
            now = time.monotonic()
            if dog.look(now, _boottime()) is not None:
                # the tree was not looked at meanwhile: its quiet run proves nothing now
                watch.reset_quiet()
            for t in pump.take_progress():
                dog.progress(t)
            if proc.poll() is not None:
                watch.root_exited(proc.returncode, time.monotonic())
                break
            if (size := _output_size(spec.log_path)) != output_size:
                output_size, output_at = size, now
            watch.tick(now, output_at)
            _remember(watch.new_pids(), seen)
            dog.quiet(watch.quiet_since)
            dog.closed(watch.closed_since, closed_words(watch.closed_members))
            fired = dog.check(now)
            if on_tick is not None and (fired is not None or now >= next_tick):
                next_tick = now + TICK_S
                window, left = dog.countdown(now)
                on_tick(
                    Tick(
                        now - start,
                        window,
                        left,
                        dog.progress_events,
                        dict(pump.frames[-1].metrics) if pump.frames else {},
                        _tree_cpu(watch),
                        Phase.SAMPLING if fired is not None else Phase.RUN,
                    )
                )
            if fired is not None:
                trigger, reason = fired, dog.reason(fired, now)
                progressing = dog.progressing(now)
                if sampling.enabled:
                    watch.stop_tracing()  # strace on a thread would refuse the stack tools
                    samples, sampling_s = _sample(proc.pid, sampling, watch, start)
                why = attrigger.confirm(watch, fired, samples)
                if why is not None:
                    # the tree moved after all: no early verdict, watch on
                    what = "quiescence" if fired is Trigger.QUIESCENT else "the closed set"
                    watch.notes.append(f"{what} not confirmed after the stack dump: {why}")
                    watch.reset_quiet()
                    dog.quiet(None)
                    dog.closed(None)
                    samples, sampling_s = None, 0.0
                    trigger, reason = Trigger.EXIT, "exited"
                    dog.resync(time.monotonic(), _boottime())  # the dump is no pause
                    time.sleep(POLL_S)
                    continue
                if samples is not None:
                    watch.annotate(samples)
                    if fired in (Trigger.STARTUP, Trigger.STALL, Trigger.WALL):
                        attrigger.trace_polling(samples)
                break
            time.sleep(POLL_S)
    except Interrupted as exc:
        # Not re-raised: the caller still gets an outcome for the partial report.
        trigger, reason = Trigger.INTERRUPT, f"the harness received signal {exc.signum}"
        interrupt_signal = exc.signum
    finally:
        # orphans of the trainer that left its session were adopted by us (subreaper)
        if watch is not None:
            _remember(watch.new_pids(), seen)  # born during the last look or the dump
        adopted = [p for p in proctree.descendants(os.getpid()) if p.pid not in before]
        cleanup = proctree.kill_tree(proc, proc.pid, [*seen.values(), *adopted])
        if watch is not None:
            watch.close()
        guard.release()  # the tree is dead and reaped: the reaper exits, killing nothing
        if pump is not None:
            pump.join(timeout=2.0)
        with contextlib.suppress(OSError):
            os.close(read_fd)
        if pump is not None:
            pump.join(timeout=1.0)
    if pump is None:  # interrupted before the output pump started: an empty, unstarted one
        pump = OutputPump(-1, spec.log_path, parser, None)
    for t in pump.take_progress():
        dog.progress(t)
    end = time.monotonic()
    return RunOutcome(
        trigger=trigger,
        reason=reason,
        returncode=proc.returncode if trigger is Trigger.EXIT else None,
        pid=proc.pid,
        started_at=wall_start,
        duration_s=end - start,
        first_progress_s=None if dog.first_progress_at is None else dog.first_progress_at - start,
        progress_events=dog.progress_events,
        progressing_at_end=progressing,
        interrupt_signal=interrupt_signal,
        frames=list(pump.frames),
        output_tail=list(pump.tail),
        output_lines=pump.lines,
        samples=samples,
        sampling_s=sampling_s,
        cleanup=cleanup,
        unparsed_lines=pump.unparsed_lines,
        frames_total=pump.frames_total,
        notes=[*([f"output: {pump.error}"] if pump.error else []), *dog.pause_notes()],
        pauses=list(dog.pauses),
        affinity=affinity,
    )


def command_env(
    overrides: Mapping[str, str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(overrides)
    return env
