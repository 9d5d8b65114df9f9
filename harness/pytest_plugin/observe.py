"""pytest's tree as the watcher samples it: the `Observer` of `harness attach`, with three
differences a test session needs.

- The plugin's own threads (the listener; xdist's execnet receiver) are left out of the
  stacks as they are of the quiescence rule (`ignore`): a thread blocked reading the
  watcher's pipe is never where a test hangs.
- Threads an earlier hung test left deadlocked in pytest (its main thread was interrupted,
  its threads stay) are left out of the stacks too (`left`): the next hang is located in
  its own test, not in the old one.
- The pthread mutex wait-for graph is read in Python processes too: a ctypes call or a C
  extension that deadlocks on mutexes runs inside pytest, a Python process, which the
  sampler's own lock reading passes over (`harness.sampling.sample.lock_cycles` reads
  native processes unless asked for Python ones)."""

from __future__ import annotations

from harness.execute.attach import Observer
from harness.execute.runner import SampleOptions
from harness.pytest_plugin import procstart
from harness.sampling.model import SampleSet
from harness.sampling.sample import lock_cycles


class PluginObserver(Observer):
    left: set[tuple[int, int]]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.left = set()

    def sample(self, sampling: SampleOptions, refusal: str | None) -> SampleSet:
        samples = super().sample(sampling, refusal)
        out = self.ignore | self.left
        samples.stacks = [s for s in samples.stacks if (s.pid, s.tid) not in out]
        samples.activity = [a for a in samples.activity if (a.pid, a.tid) not in out]
        if refusal is None:
            _python_lock_cycles(samples)
        return samples

    def leave_out_threads_since(self, pid: int, boot: float) -> list[int]:
        """Threads of `pid` (its main thread excepted) started at or after `boot` (seconds
        since boot): the hung test's, still there after its main thread was interrupted."""
        born = [tid for tid in procstart.threads_since(pid, boot) if tid != pid]
        self.left.update((pid, tid) for tid in born)
        return born


def _python_lock_cycles(samples: SampleSet) -> None:
    """Mutex cycles of the Python processes of the last snapshot that wait on a futex (the
    sampler read those of native processes already)."""
    if samples.snapshots:
        last = samples.snapshots[-1].processes
        samples.lock_cycles += lock_cycles(last, samples, python=True)
