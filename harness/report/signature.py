"""How runs failed, in one place: a `FailureSignature` is the verdict's kind, mechanism,
location and top cause. It is the key of a repeat aggregate's groups (report/repeat.py),
what `harness diff` compares between two sides (pipeline/diffsides.py, pipeline/diff.py),
and its one line of text is the same in both. A report without a verdict (an interrupted,
failed or abandoned run) stands for `standing_kind`: the one rule for it."""

from __future__ import annotations

from dataclasses import dataclass

from harness.analysis.classify import Verdict
from harness.outcome import Kind
from harness.report.model import Report
from harness.vocab import Mechanism, RunStatus


def standing_kind(report: Report) -> Kind:
    """The kind that stands for a run: its verdict's; without one, `interrupted` for a run
    stopped by a signal and `error` for one that failed or was abandoned on the way."""
    if report.verdict is not None:
        return report.verdict.kind
    return Kind.INTERRUPTED if report.status == RunStatus.INTERRUPTED else Kind.ERROR


@dataclass(frozen=True)
class FailureSignature:
    """How runs failed: two runs with equal signatures failed the same way."""

    kind: Kind
    mechanism: Mechanism | None = None
    location: str | None = None
    cause: str | None = None  # the top cause's id

    @classmethod
    def of_verdict(cls, v: Verdict) -> FailureSignature:
        return cls(v.kind, v.mechanism, v.location, v.causes[0].id if v.causes else None)

    @classmethod
    def of_report(cls, report: Report) -> FailureSignature:
        if report.verdict is not None:
            return cls.of_verdict(report.verdict)
        return cls(standing_kind(report))

    def text(self) -> str:
        """One line: "hang (deadlock) in env_start [openmp-after-fork]"."""
        how = f" ({self.mechanism})" if self.mechanism else ""
        where = f" in {self.location}" if self.location else ""
        why = f" [{self.cause}]" if self.cause else ""
        return f"{self.kind}{how}{where}{why}"
