"""Turn what was observed (exit status, watchdog trigger, thread samples, stacks, output)
into a Verdict: a kind, for hangs a mechanism and a location, and evidence lines.

Stack patterns are data (harness/data/signatures.toml for runtimes, the pin's
[[signatures]] for the upstream's own functions); this module only applies them.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path

from harness import outcome
from harness.analysis.causes import Cause
from harness.config.signatures import Signatures
from harness.execute.watchdog import Trigger
from harness.outcome import Kind
from harness.process.signals import signal_name
from harness.sampling.model import Frame, SampleSet, ThreadStack, spinning
from harness.source.blame import HangBlame
from harness.vocab import Mechanism, WaitKind

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

    def become(self, kind: Kind, *, signum: int | None = None) -> None:
        """Change the kind (a passing run whose checks failed, an interrupted one); the exit
        code follows from the registry again."""
        self.kind = kind
        self.__post_init__(signum)


# ---------------------------------------------------------------- stacks


def _frame_text(frame: Frame) -> str:
    where = (frame.file or frame.module or "").rsplit("/", 1)[-1]
    if where and frame.line:
        where = f"{where}:{frame.line}"
    return f"{frame.function} ({where})" if where else frame.function


@dataclass
class ThreadView:
    """One thread as the classifier sees it: activity across snapshots plus its stack."""

    pid: int
    tid: int
    name: str
    states: list[str]
    cpu_fraction: float
    wchan: str
    stack: ThreadStack | None

    @property
    def is_main(self) -> bool:
        return self.pid == self.tid

    @property
    def busy(self) -> bool:
        return spinning(self.states, self.cpu_fraction)

    @property
    def last_state(self) -> str:
        return self.states[-1] if self.states else "?"


def _views(samples: SampleSet) -> list[ThreadView]:
    stacks: dict[tuple[int, int], ThreadStack] = {}
    for st in samples.stacks:
        # prefer a Python stack for Python threads: it names the user's function
        key = (st.pid, st.tid)
        if key not in stacks or st.python:
            stacks[key] = st
    views = [
        ThreadView(
            a.pid, a.tid, a.name, a.states, a.cpu_fraction, a.wchan, stacks.get((a.pid, a.tid))
        )
        for a in samples.activity
    ]
    known = {(a.pid, a.tid) for a in samples.activity}
    for key, st in stacks.items():  # a stack without activity (thread born after snapshots)
        if key not in known:
            views.append(ThreadView(st.pid, st.tid, st.name, [], 0.0, "", st))
    return views


@dataclass
class Located:
    name: str
    own_index: int  # index of the located own frame in the stack (innermost = 0)
    named: bool  # True when a pin signature matched


def _locate(stack: ThreadStack, sigs: Signatures) -> Located | None:
    frames = stack.frames
    for i, frame in enumerate(frames):  # the innermost frame that a named location matches
        for sig in sigs.own:
            if sig.matches(frame):
                return Located(sig.name, i, True)
    for i, frame in enumerate(frames):
        if frame.own and frame.function not in ("??", ""):
            return Located(frame.function, i, False)
    return None


def _runtime_names(frames: Sequence[Frame], sigs: Signatures) -> list[str]:
    names: list[str] = []
    for frame in reversed(frames):  # outermost first: "libgomp team start" before "futex wait"
        for pat in sigs.runtime:
            if pat.matches(frame) and pat.name not in names:
                names.append(pat.name)
    return names


def _is_passive(view: ThreadView, sigs: Signatures) -> bool:
    if view.stack is None:
        return view.wchan in ("do_wait", "kernel_wait4")
    frames = view.stack.frames
    own = next((i for i, f in enumerate(frames) if f.own), min(len(frames), 6))
    return any(p.passive and p.matches(f) for f in frames[:own] for p in sigs.runtime)


def _mechanism_hint(view: ThreadView, sigs: Signatures) -> str | None:
    if view.stack is None:
        return None
    for frame in view.stack.frames:
        for pat in sigs.runtime:
            if pat.mechanism and pat.matches(frame):
                return pat.mechanism
    return None


# ---------------------------------------------------------------- hang


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
        if main is not None and _mechanism_hint(main, sigs) == "exit-blocked":
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


def _pick_location(
    culprits: list[ThreadView], sigs: Signatures
) -> tuple[Located, ThreadView] | None:
    found = [(loc, v) for v in culprits if v.stack and (loc := _locate(v.stack, sigs))]
    if not found:
        return None
    named = [(loc, v) for loc, v in found if loc.named]
    if named:
        order = {sig.name: i for i, sig in enumerate(sigs.own)}
        return min(named, key=lambda lv: (order.get(lv[0].name, 99), not lv[1].is_main))
    common = Counter(loc.name for loc, _ in found).most_common(1)[0][0]
    candidates = [(loc, v) for loc, v in found if loc.name == common]
    return min(candidates, key=lambda lv: not lv[1].is_main)


def classify_hang(samples: SampleSet | None, reason: str, sigs: Signatures) -> Verdict:
    evidence = [reason]
    if samples is None or not samples.activity:
        evidence.append("no thread samples were taken (sampling disabled or the tree was gone)")
        return Verdict(Kind.HANG, "hang: " + reason, evidence=evidence)
    views = _views(samples)
    mechanism, culprits, why = _mechanism(views, sigs)
    evidence.append(f"mechanism {mechanism}: {why}")
    picked = _pick_location(culprits, sigs)
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
        frames = [_frame_text(f) for f in reversed(inner)]
        runtime = _runtime_names(inner[:-1], sigs)
        if "futex" in view.wchan and "futex wait" not in runtime:
            # unsymbolized runtime frames: the kernel's wait channel still says what it waits on
            runtime.append(f"futex wait (wchan {view.wchan})")
        evidence.append(
            f"location {location} on pid {view.pid} tid {view.tid} ('{view.name}'), "
            f"from {view.stack.source}: " + " → ".join(frames)
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
    if verdict.mechanism not in (Mechanism.DEADLOCK, Mechanism.EXIT_BLOCKED):
        old = verdict.mechanism
        verdict.mechanism = Mechanism.DEADLOCK
        verdict.summary = (
            verdict.summary.replace(f"hang ({old})", "hang (deadlock)", 1)
            if old
            else "hang (deadlock): " + reason
        )
    waits = [w for w in samples.waits if w.kind is WaitKind.TREE] if samples is not None else []
    verdict.evidence[1:1] = [
        f"pid {w.pid} tid {w.tid} waits on the tree: {w.what}" for w in waits[:12]
    ]
    return verdict


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
    if trigger is Trigger.WALL and progressing:
        return Verdict(
            Kind.TIMEOUT_PROGRESSING,
            "wall-clock limit reached while the run was still making progress",
            evidence=[reason],
        )
    return classify_hang(samples, reason, sigs)


def located_frame(verdict: Verdict, samples: SampleSet | None) -> tuple[ThreadStack, Frame] | None:
    """The stack and the own frame the verdict's location names, with a file and line
    (OpenMP outlined copies such as env_start._omp_fn.0 count as the function)."""
    if not verdict.location or samples is None:
        return None
    for stack in samples.stacks:
        for frame in stack.frames:
            name = frame.function.split("._omp_fn", 1)[0]
            if frame.own and name == verdict.location and frame.file and frame.line:
                return stack, frame
    return None


def path_in_tree(file: str, tree: Path) -> Path | None:
    """A frame's file relative to the build tree, or None when it lies outside: DWARF names
    files as the compiler saw them, absolute or relative to the tree it ran in."""
    path = Path(file)
    if not path.is_absolute():
        return path
    return path.relative_to(tree) if path.is_relative_to(tree) else None
