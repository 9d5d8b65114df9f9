"""What the runner does at a trigger, after the stacks: an early trigger (quiescent,
closed) confirmed on a fresh look, and a window's verdict whose wake chain ends at a timed
thread told what that thread polls (sampling/polltrace.py)."""

from __future__ import annotations

import time

from harness.sampling import polltrace
from harness.sampling.model import SampleSet
from harness.vocab import WakeEnd
from harness.watch.watchdog import Trigger
from harness.watch.watchloop import WatchLoop


def trace_polling(samples: SampleSet) -> None:
    """A window's verdict whose wake chain ends at a thread asleep on a timer: what that
    thread polls, from a second of its syscalls (sampling/polltrace.py), in the chain's end."""
    wake = samples.wake
    if wake is None or wake.end is not WakeEnd.TIMED or wake.end_tid is None:
        return
    t0 = time.monotonic()
    found = polltrace.trace(wake.end_tid)
    samples.timings["polltrace"] = time.monotonic() - t0
    if isinstance(found, polltrace.PollTrace):
        told = found.words()
        wake.end_what += f"; {told}"
        if found.polls():  # a loop that checks something; a bare sleeper polls nothing
            wake.polled = told
    else:
        wake.end_what += f"; not traced: {found}"


def confirm(watch: WatchLoop, fired: Trigger, samples: SampleSet | None) -> str | None:
    """An early trigger (quiescent, closed) holds after the stack dump (None), or why not;
    its time in the samples. The windows' triggers need no confirmation."""
    if fired not in (Trigger.QUIESCENT, Trigger.CLOSED):
        return None
    t0 = time.monotonic()
    why = watch.confirm(samples) if fired is Trigger.QUIESCENT else watch.confirm_closed()
    if samples is not None:
        samples.timings["confirm"] = time.monotonic() - t0
    return why
