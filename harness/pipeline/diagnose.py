"""After the verdict: why (cause rules over the evidence, analysis/causes.py) and, for a
hang located on a source line of a git checkout, the commit behind that line and behind the
OpenMP pragma above it (source/blame.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from harness.analysis import causes as causesmod
from harness.analysis import location, waitchain
from harness.analysis.classify import located_frame, path_in_tree
from harness.config.defaults import compare_baseline
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.outcome import Kind
from harness.report.model import Report
from harness.source import blame as blamemod
from harness.source.git import locate_checkout
from harness.vocab import SourceKind, WakeEnd


def compare_command(report: Report, pin: Pin | None, compare_args: str = "") -> str:
    """The harness command that tests the pin's fixes against this run's variant:
    `harness compare ENV --variants <variant>,<fixes> <the run's own options>`; "" when the
    pin names no fix (or there is no pin: a watched command)."""
    if pin is None or not pin.fixes or not report.env:
        return ""
    variant = report.variant.spec if report.variant else compare_baseline()
    command = f"harness compare {report.env} --variants {','.join((variant, *pin.fixes))}"
    return f"{command} {compare_args}" if compare_args else command


def diagnose(
    report: Report,
    pin: Pin | None,
    checkout: Path | None = None,
    commit: str | None = None,
    compare_args: str = "",
) -> None:
    v = report.verdict
    if v is None:
        return
    compare = compare_command(report, pin, compare_args)
    wake = report.samples.wake if report.samples is not None else None
    if v.kind is Kind.HANG and wake is not None and wake.end in (WakeEnd.NOBODY, WakeEnd.CYCLE):
        # before the causes: the graph's readings (data/causes/wake.toml) read the end. A
        # helper thread that would have ended the wait died (its traceback in the output):
        # at nobody, it is the one that could; in a cycle, the death comes before the cycle
        # it left, when the watch saw a thread of the cycle's processes exit
        died = thread_died(report.progress.output_tail)
        if died and (wake.end is WakeEnd.NOBODY or wake.lost):
            if wake.end is WakeEnd.CYCLE:
                gone = ", ".join(f"tid {t} of pid {p}" for p, t in wake.lost[:4])
                wake.end_what = (
                    f"{wake.end_what}, after a thread of theirs died ({gone} exited during "
                    "the run): what it was to do for them (a put, a set, a release) never came"
                )
                wake.end_pid = wake.end_tid = None
            wake.end = WakeEnd.DEAD
            wake.end_what += f"; the output shows a thread that died: {died}"
    facts = causesmod.Facts(
        kind=v.kind,
        mechanism=v.mechanism,
        location=v.location,
        samples=report.samples,
        output_tail=report.progress.output_tail,
        env=report.env,
        compare=compare,
        report_dir=report.directory,
        stuck_in=tuple(f.split(" (", 1)[0] for f in v.location_frames),
    )
    rules = causesmod.checked_rules(pin.causes if pin is not None else ())
    v.causes = causesmod.diagnose(facts, rules)
    v.compare = compare
    v.waits_for = _waits_for(report)
    if v.kind is Kind.HANG and wake is not None:
        # one chain: the kernel's edges, each link with its thread's call in the program
        calls = waitchain.program_calls(report.samples) if report.samples is not None else {}
        v.wake_chain = wake.text(calls)
    if v.kind is Kind.HANG and v.location:
        _blame(report, pin, checkout, commit)


# the name may be gone from the line: another thread's write came between excepthook's
# "Exception in thread " and the name, and the line's trailing space is stripped
_THREAD_DIED = re.compile(r"Exception in thread(?: (.{0,120}))?$")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*)$")
_TRACEBACK = "Traceback (most recent call last):"


def thread_died(tail: Sequence[str]) -> str:
    """A Python thread that ended with an uncaught exception, from the output
    (threading.excepthook's `Exception in thread NAME:` and the traceback's last line):
    `Thread-1 (produce): ValueError: bad row`; "" when the output shows none. Lines of other
    threads may cut into it (stdout and stderr share the pipe): `Exception in thread tile 1
    rendered`, then `enqueuer:` on a later line, just before the traceback."""
    lines = [x.strip() for x in tail]
    for i, line in enumerate(lines):
        m = _THREAD_DIED.search(line)  # another thread's line may have come first
        if m is None:
            continue
        after = lines[i + 1 : i + 60]
        name = m.group(1) or ""
        if not name.endswith(":"):
            at = next((k for k, x in enumerate(after) if x.endswith(_TRACEBACK)), -1)
            name = after[at - 1] if at > 0 and after[at - 1].endswith(":") else "a thread:"
        last = next((x for x in after if _EXCEPTION.match(x)), "")
        return f"{name[:-1]}: {last}" if last else name[:-1]
    return ""


def _waits_for(report: Report) -> str:
    """Who waits for whom, from the outermost waiter to where the chain ends
    (analysis/waitchain.py): `pid 100 waits for child pid 101 in Popen.wait; pid 101 blocks
    writing stdout (pipe:[9]), read only by pid 100: located in chatter`."""
    v, s = report.verdict, report.samples
    if v is None or s is None or v.kind is not Kind.HANG:
        return ""
    chain = waitchain.follow(s)
    if chain is None or not chain.links:
        return ""
    return chain.text(v.location if location.ends_in(chain, s, v.location) else None)


def _blame(report: Report, pin: Pin | None, checkout: Path | None, commit: str | None) -> None:
    v = report.verdict
    assert v is not None
    found = located_frame(v, report.samples)
    if found is None:
        v.blame_skipped = "the located frame has no source file and line"
        return
    frame = found[1]
    if pin is None or pin.source.kind is not SourceKind.GIT:
        what = f"a {pin.source.kind} source" if pin is not None else "a watched command"
        v.blame_skipped = (
            f"no history to blame: {what}, not a git checkout "
            "(a git pin, or --checkout PATH, gives the commit behind the hang line)"
        )
        return
    assert frame.file is not None and frame.line is not None
    if report.build is None:
        v.blame_skipped = "no build tree to map the frame's file to the checkout"
        return
    rel = path_in_tree(frame.file, report.build.tree)
    if rel is None:
        v.blame_skipped = f"{frame.file} is not a file of the build tree"
        return
    try:
        root = locate_checkout(pin, checkout)
        v.blame = blamemod.blame_hang(
            root, rel, frame.line, function=v.location, rev=commit or "HEAD"
        )
    except HarnessError as exc:
        v.blame_skipped = exc.message
