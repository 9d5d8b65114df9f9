"""Turn what was observed (exit status, watchdog trigger, thread samples, stacks, output)
into a Verdict: a kind, for hangs a mechanism and a location, and evidence lines.

Stack patterns are data (harness/data/signatures.toml for runtimes, the pin's
[[signatures]] for the upstream's own functions); this module only applies them.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field

from harness import outcome
from harness.analysis import location as locating
from harness.analysis.causes import Cause
from harness.config.signatures import Signatures
from harness.outcome import Kind
from harness.process.signals import signal_name
from harness.sampling.model import WAKE_EVIDENCE, Frame, SampleSet, ThreadStack, WakeChain
from harness.sampling.runtimes import SHIM_RUNTIME
from harness.source.blame import HangBlame
from harness.vocab import Mechanism, WaitKind, WakeEnd
from harness.watch.watchdog import Trigger

CRASH_SIGNALS = {
    signal.SIGSEGV,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGTRAP,
    signal.SIGSYS,
    signal.SIGKILL,
}


@dataclass
class Verdict:
    """What happened. Build one with `Verdict(kind, summary, …)`: the exit code is never
    given, it comes from the outcome registry (`outcome.exit_code(kind)`), and for an
    interrupted run from the signal (`signum`: exit 128 + N)."""

    kind: Kind
    summary: str
    mechanism: Mechanism | None = None  # hangs only
    location: str | None = None  # e.g. the upstream function the hang is in
    location_frames: list[str] = field(
        default_factory=list
    )  # own frame, then runtime frames inward
    runtime: list[str] = field(default_factory=list)  # runtime pattern names under the location
    evidence: list[str] = field(default_factory=list)
    # why, and what to try (analysis/causes.py), most confident first
    causes: list[Cause] = field(default_factory=list)
    # the commit behind the located line (and its OpenMP pragma), in a git checkout
    blame: HangBlame | None = None
    blame_skipped: str = ""  # why there is no blame, when a hang was located
    # who waits for whom: "pid 100 waits for child pid 101, which is blocked in <location>"
    waits_for: str = ""
    # the wake chain (watch/wakegraph.py): from the thread the user sees waiting, who alone
    # could end each wait, to where it ends ("… → ends: dead: tid 12 …")
    wake_chain: str = ""
    # the harness command that tests the pin's fixes on this run ("harness compare ENV
    # --variants stock,omp-free,fixed ..."); "" when the pin names no fix
    compare: str = ""
    signum: InitVar[int | None] = None  # an interrupted run: the signal that stopped it
    exit_code: int = field(init=False)

    def __post_init__(self, signum: int | None) -> None:
        self.kind = outcome.kind_of(self.kind)
        if self.mechanism is not None:
            self.mechanism = Mechanism(self.mechanism)
        self.exit_code = outcome.exit_code(self.kind)
        if self.kind is Kind.INTERRUPTED and signum:
            self.exit_code = outcome.interrupted_code(signum)

    @property
    def beside_chain(self) -> list[str]:
        """The evidence lines a report shows under its chain row: all but the wake chain's
        own line, which would show the chain again."""
        return [e for e in self.evidence if not (self.wake_chain and e.startswith(WAKE_EVIDENCE))]

    def become(self, kind: Kind, *, signum: int | None = None) -> None:
        """Change the kind (a passing run whose checks failed, an interrupted one); the exit
        code follows from the registry again."""
        self.kind = kind
        self.__post_init__(signum)


# ---------------------------------------------------------------- stacks

# the location's pieces live in analysis/location.py; these names stay importable here
ThreadView = locating.ThreadView
_frame_text = locating.frame_text
_views = locating.views
_locate = locating.locate
_runtime_names = locating.runtime_names
_is_passive = locating.is_passive
_pick_location = locating.pick_location
path_in_tree = locating.path_in_tree


def _mechanism_hint(view: ThreadView, sigs: Signatures) -> str | None:
    if view.stack is None:
        return None
    for frame in view.stack.frames:
        for pat in sigs.runtime:
            if pat.mechanism and pat.matches(frame):
                return pat.mechanism
    return None


# ---------------------------------------------------------------- hang

# waits that end by themselves (docs/quiescence.md): a tree whose threads only do these is idle
_ASLEEP = (WaitKind.TIMED, WaitKind.HOUSEKEEPING)


def _asleep(view: ThreadView) -> bool:
    """The thread sleeps on a timer of its own. A TIMED wait counts only when the watch loop
    marked it idle: quiescence also calls a futex or wait4 TIMED when the process merely
    catches SIGALRM or has POSIX timers (a timer *may* end it), and a deadlock in such a
    process is no idle program. A HOUSEKEEPING wait was an idle timed one by construction."""
    wait = view.wait
    if wait is not None and wait.late_s is not None:
        return wait.idle  # asleep on its own timer, which ends after the run's limit
    if wait is None or wait.kind not in _ASLEEP:
        return False
    return wait.idle or wait.kind is WaitKind.HOUSEKEEPING


def _mechanism(
    views: list[ThreadView], sigs: Signatures
) -> tuple[Mechanism, list[ThreadView], str]:
    """(mechanism, the threads where the hang sits, why)."""
    by_pid: dict[int, list[ThreadView]] = {}
    for v in views:
        by_pid.setdefault(v.pid, []).append(v)
    stopped = [v for v in views if v.states and all(s in "Tt" for s in v.states)]
    if stopped and len(stopped) == len([v for v in views if v.states]):
        return (
            Mechanism.STOPPED,
            stopped,
            "every thread is stopped (state T): a job-control or debugger stop",
        )
    for pid, threads in by_pid.items():
        main = next((t for t in threads if t.is_main), None)
        others = [t for t in threads if not t.is_main and t.last_state not in "ZX"]
        if main is not None and main.last_state in "ZX" and others:
            return (
                Mechanism.EXIT_BLOCKED,
                others,
                f"pid {pid}: the main thread has exited (state Z) but {len(others)} thread(s) keep "
                "the process alive",
            )
        if main is not None and _mechanism_hint(main, sigs) == Mechanism.EXIT_BLOCKED:
            return (
                Mechanism.EXIT_BLOCKED,
                others or [main],
                f"pid {pid}: the main thread has finished and waits for non-daemon threads at "
                "interpreter shutdown",
            )
    busy = [v for v in views if v.busy]
    if busy:
        pct = ", ".join(f"tid {v.tid} {v.cpu_fraction:.0%}" for v in busy)
        return Mechanism.SPIN, busy, f"busy threads with no progress: {pct}"
    live = [v for v in views if v.states and v.last_state not in "ZX"]
    asleep = [v for v in live if _asleep(v)]
    if asleep and all(v in asleep or _is_passive(v, sigs) for v in live):
        # no waker needed: every thread wakes by itself and sleeps again (a sleep, a timed
        # wait in a loop), or only waits for such a thread (a join): no deadlock
        what = "; ".join(sorted({v.wait.what for v in asleep if v.wait is not None})[:4])
        return (
            Mechanism.IDLE,
            asleep,
            f"every thread only sleeps on a timer, or waits for one that does, with no CPU "
            f"({what})",
        )
    active = [v for v in views if not _is_passive(v, sigs)] or views
    return (
        Mechanism.DEADLOCK,
        active,
        "every thread is blocked (no thread used CPU between snapshots)",
    )


def _thread_line(v: ThreadView, sigs: Signatures) -> str:
    states = ",".join(v.states) or "?"
    line = f"pid {v.pid} tid {v.tid} '{v.name}' states {states} cpu {v.cpu_fraction:.0%}"
    if v.wchan:
        line += f" wchan {v.wchan}"
    if v.stack is not None and v.stack.frames:
        chain = " ← ".join(f.function for f in v.stack.frames[:8])
        line += f": {chain}"
    return line


def classify_hang(samples: SampleSet | None, reason: str, sigs: Signatures) -> Verdict:
    evidence = [reason]
    if samples is None or not samples.activity:
        evidence.append("no thread samples were taken (sampling disabled or the tree was gone)")
        return Verdict(Kind.HANG, "hang: " + reason, evidence=evidence)
    views = _views(samples)
    mechanism, culprits, why = _mechanism(views, sigs)
    evidence.append(f"mechanism {mechanism}: {why}")
    picked = _pick_location(culprits, sigs)
    if picked is None and mechanism is not Mechanism.SPIN:
        # the stuck threads run no code of the program, and some thread only waits for
        # another (Popen.wait, Pool.map): where the wait-for chain ends
        picked = locating.at_chain_end(views, samples, sigs, evidence)
    if picked is None and mechanism is Mechanism.SPIN:
        # the busy threads run no code of the program (an OpenMP pool spinning in its
        # runtime, OMP_WAIT_POLICY=active): the hang is where the program itself is stuck
        others = [v for v in views if v not in culprits]
        picked = _pick_location(others, sigs)
        if picked is not None:
            evidence.append(
                "the busy thread(s) run no code of the program: located at the stuck thread"
            )
    location = None
    frames: list[str] = []
    runtime: list[str] = []
    if picked is not None:
        loc, view = picked
        assert view.stack is not None
        inner = view.stack.frames[: loc.own_index + 1]
        location = loc.name
        frames = [_frame_text(f) for f in reversed(inner) if f.runtime != SHIM_RUNTIME]
        runtime = _runtime_names(inner[:-1], sigs)
        if "futex" in view.wchan and "futex wait" not in runtime:
            # unsymbolized runtime frames: the kernel's wait channel still says what it waits on
            runtime.append(f"futex wait (wchan {view.wchan})")
        evidence.append(
            f"location {location} on pid {view.pid} tid {view.tid} ('{view.name}'), "
            f"from {view.stack.source}: " + " → ".join(frames)
        )
        native = locating.native_under(view, samples)
        if native:  # a Python location: what its thread does natively, innermost first
            runtime += [n for n in _runtime_names(native, sigs) if n not in runtime]
            evidence.append(
                f"native frames of tid {view.tid}: "
                + " ← ".join(f.function for f in native[: locating.NATIVE_SHOWN])
            )
        region = locating.openmp_region(native)
        if region is not None:  # the Python line only called into an OpenMP region
            location = native[region].function
            frames = [_frame_text(f) for f in reversed(native[: region + 1])]
            runtime = _runtime_names(native[:region], sigs)
            if "futex" in view.wchan and "futex wait" not in runtime:
                runtime.append(f"futex wait (wchan {view.wchan})")
            evidence.append(
                f"located in the OpenMP region {location}, which {loc.name} entered in native "
                "code: its thread waits there at the team's barrier"
            )
    else:
        evidence.append(
            "location unknown: no stack of the stuck threads names a function of the program"
        )
    if picked is not None:  # the located thread first
        culprits = [picked[1]] + [v for v in culprits if v is not picked[1]]
    evidence += [_thread_line(v, sigs) for v in culprits[:12]]
    evidence += [f"note: {n}" for n in samples.notes]
    where = f" in {location}" if location else ""
    under = f" ({' ← '.join(runtime)})" if runtime else ""
    return Verdict(
        Kind.HANG,
        f"hang ({mechanism}){where}{under}",
        mechanism=mechanism,
        location=location,
        location_frames=frames,
        runtime=runtime,
        evidence=evidence,
    )


def classify_quiescent(samples: SampleSet | None, reason: str, sigs: Signatures) -> Verdict:
    """Every thread blocked on the tree for the quiescence window (docs/quiescence.md): a
    deadlock, located by the stacks; "exit-blocked" is kept when the stacks say so (a
    deadlock at exit), and nothing that ran can be a spin."""
    verdict = classify_hang(samples, reason, sigs)
    wake = samples.wake if samples is not None else None
    # a tree that only sleeps on timers that end after the run's limit (the chain from the
    # waiting thread ends at such a sleep) is idle, early: not a deadlock
    idle = verdict.mechanism is Mechanism.IDLE and wake is not None and wake.end is WakeEnd.LATE
    if verdict.mechanism not in (Mechanism.DEADLOCK, Mechanism.EXIT_BLOCKED) and not idle:
        old = verdict.mechanism
        verdict.mechanism = Mechanism.DEADLOCK
        verdict.summary = (
            verdict.summary.replace(f"hang ({old})", "hang (deadlock)", 1)
            if old
            else "hang (deadlock): " + reason
        )
    all_waits = samples.waits if samples is not None else []
    waits = [w for w in all_waits if w.kind is WaitKind.TREE]
    # the threads the rule excused, and why (docs/quiescence.md, housekeeping)
    excused = [w for w in all_waits if w.kind is WaitKind.HOUSEKEEPING]
    verdict.evidence[1:1] = [
        *(f"pid {w.pid} tid {w.tid} waits on the tree: {w.what}" for w in waits[:12]),
        *(f"pid {w.pid} tid {w.tid} not counted: {w.what}" for w in excused[:12]),
    ]
    return verdict


def classify_closed(samples: SampleSet | None, reason: str, sigs: Signatures) -> Verdict:
    """A closed set of the wake graph: a deadlock of the set's threads, located in them;
    the rest of the run may have been running (it is not what hangs)."""
    members = {(p, t) for p, t in samples.wake.closed} if samples and samples.wake else set()
    if samples is None or not members:
        return classify_quiescent(samples, reason, sigs)
    inside = _only(samples, members)
    wake = samples.wake
    assert wake is not None
    verdict = _at_chain_end(inside, wake, reason, sigs) or classify_quiescent(inside, reason, sigs)
    verdict.evidence.insert(1, f"{WAKE_EVIDENCE}{wake.text()}")
    return verdict


def _only(samples: SampleSet, threads: set[tuple[int, int]]) -> SampleSet:
    """The samples of these threads alone, and of the exited threads of their processes (a
    main thread that returned while others keep the process alive: exit-blocked)."""
    pids = {p for p, _ in threads}
    done = {(w.pid, w.tid) for w in samples.waits if w.pid in pids and w.kind is WaitKind.DONE}
    keep = threads | done
    return dataclasses.replace(
        samples,
        stacks=[s for s in samples.stacks if (s.pid, s.tid) in keep],
        activity=[a for a in samples.activity if (a.pid, a.tid) in keep],
        waits=[w for w in samples.waits if (w.pid, w.tid) in keep],
        lock_cycles=[c for c in samples.lock_cycles if c.pid in pids],
    )


def _at_chain_end(
    samples: SampleSet, wake: WakeChain, reason: str, sigs: Signatures
) -> Verdict | None:
    """Located at the wake chain's end, when it ends at a thread nothing can wake (nobody,
    a dead waker) and the program's own code runs there: the child that waits forever, the
    daemon that holds the lock, not the caller who waits for them. A cycle has no one end:
    None, and the set is located as a whole."""
    if wake.end not in (WakeEnd.NOBODY, WakeEnd.DEAD) or wake.end_pid is None:
        return None
    assert wake.end_tid is not None
    there = _only(samples, {(wake.end_pid, wake.end_tid)})
    if not there.stacks:
        return None
    verdict = classify_quiescent(there, reason, sigs)
    return verdict if verdict.location else None


# ---------------------------------------------------------------- exits


def explain_output(tail: Sequence[str], sigs: Signatures) -> list[str]:
    found: list[str] = []
    for line in tail:
        for pat in sigs.output:
            m = pat.regex.search(line)
            if m:
                text = pat.summary.format(**{k: v or "" for k, v in m.groupdict().items()})
                if text not in found:
                    found.append(text)
    return found


def classify_exit(returncode: int, tail: Sequence[str], sigs: Signatures) -> Verdict:
    explained = explain_output(tail, sigs)
    last = [f"output: {line}" for line in tail[-5:] if line.strip()]
    if returncode == 0:
        return Verdict(Kind.PASS, "exited 0")
    sig = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    via = "" if returncode < 0 else f" (exit status {returncode} = 128 + signal)"
    if sig and (returncode < 0 or sig in CRASH_SIGNALS):
        name = signal_name(sig)
        return Verdict(
            Kind.CRASH,
            f"crash: killed by {name}{via}" + (f": {explained[0]}" if explained else ""),
            evidence=[f"terminated by {name}{via}", *explained, *last],
        )
    summary = f"error-exit: status {returncode}" + (f": {explained[0]}" if explained else "")
    return Verdict(
        Kind.ERROR_EXIT, summary, evidence=[f"exit status {returncode}", *explained, *last]
    )


def classify(
    trigger: Trigger,
    reason: str,
    returncode: int | None,
    progressing: bool,
    samples: SampleSet | None,
    tail: Sequence[str],
    sigs: Signatures,
) -> Verdict:
    if trigger is Trigger.EXIT:
        assert returncode is not None
        return classify_exit(returncode, tail, sigs)
    if trigger is Trigger.INTERRUPT:  # the caller sets exit_code to 128 + the signal
        return Verdict(Kind.INTERRUPTED, f"interrupted: {reason}", evidence=[reason])
    if trigger is Trigger.QUIESCENT:
        return classify_quiescent(samples, reason, sigs)
    if trigger is Trigger.CLOSED:
        return classify_closed(samples, reason, sigs)
    if trigger is Trigger.WALL and progressing:
        return Verdict(
            Kind.TIMEOUT_PROGRESSING,
            "wall-clock limit reached while the run was still making progress",
            evidence=[reason],
        )
    return classify_hang(samples, reason, sigs)


def located_frame(verdict: Verdict, samples: SampleSet | None) -> tuple[ThreadStack, Frame] | None:
    """The stack and the own frame the verdict's location names, with a file and line."""
    return locating.located_frame(verdict.location, samples)
