"""What a triage's steps recorded, read for people: the readers both tellings share
(story_html: triage.html; story_issue: issue.md).

A step's result is its own dataclass (triage/results.py), every field optional: a value
that is None or empty is said "not known", never guessed; so is the host, the doctor's
typed fingerprint. `Evidence` says which files behind a claim exist: regular files inside
the triage folder, as they are now."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from harness import outcome
from harness.contain import is_inside
from harness.doctor.fingerprint import HostFingerprint, cpu_ranges
from harness.filenames import (
    INDEX_HTML,
    REPEAT_JSON,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    table_json,
)
from harness.triage.model import Step, TriageResult
from harness.triage.results import CauseFact, HistoryResult, ReproduceResult
from harness.vocab import StepStatus, TableKind, TriageStep

NOT_KNOWN = "not known"


def seconds(value: float | None) -> str:
    if value is None:
        return NOT_KNOWN
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def pct(value: float) -> str:
    return f"{value:.0%}"


def step_state(step: Step) -> str:
    """The step's state in a few words: "done in 41 s (estimated 60 s)", "skipped: budget"."""
    estimate = f"estimated {seconds(step.estimate_s)}" if step.estimate_s else ""
    if step.status is StepStatus.DONE:
        took = f" in {seconds(step.duration_s)}" if step.duration_s is not None else ""
        return f"done{took}" + (f" ({estimate})" if estimate else "")
    reason = step.reason or "no reason recorded"
    if step.status is StepStatus.PENDING:
        return f"not reached: {reason} (a triage continues with --resume)"
    return f"{step.status}: {reason}"


def not_investigated(step: Step) -> str | None:
    """One line for a step that did not run (None when it did): "not investigated: …"."""
    if step.status is StepStatus.DONE:
        return None
    reason = step.reason or str(step.status)
    if step.status is StepStatus.FAILED:
        return f"could not be investigated: {reason}"
    if step.status is StepStatus.PENDING:
        return f"not investigated yet: {reason}" if step.reason else "not investigated yet"
    return f"not investigated: {reason}"


def rate_text(result: ReproduceResult) -> str | None:
    """The rate in words: "4/4 runs failed (100%, 95% interval 51%–100%): 4 hang"; None
    without runs."""
    counts = {k: n for k, n in result.counts.items() if n}
    rate = result.failure_rate
    runs = result.runs if result.runs is not None else (sum(counts.values()) if counts else None)
    if runs is None:
        return None
    if counts:
        failed = sum(n for k, n in counts.items() if outcome.reproduces(k))
    elif rate is not None:
        failed = round(rate * runs)
    else:
        return f"{runs} runs"
    text = f"{failed}/{runs} runs failed"
    if rate is not None:
        ci = result.failure_rate_ci95
        interval = f", 95% interval {pct(ci[0])}–{pct(ci[1])}" if ci is not None else ""
        text += f" ({pct(rate)}{interval})"
    if counts:
        text += ": " + ", ".join(f"{n} {k}" for k, n in counts.items())
    return text


def cause_line(cause: CauseFact) -> str:
    """One line for a cause: "openmp-after-fork: OpenMP used after fork (high confidence):
    the sentence"."""
    # a title that is the id is said once
    head = ": ".join(dict.fromkeys(w for w in (cause.id, cause.title) if w))
    if cause.confidence:
        head += f" ({cause.confidence} confidence)"
    if cause.sentence:
        head = f"{head}: {cause.sentence}" if head else cause.sentence
    return head or NOT_KNOWN


def host_facts(h: HostFingerprint | None) -> list[tuple[str, str]]:
    """The host fingerprint (doctor/fingerprint.py) as (label, plain text) pairs."""
    if h is None:
        return [("host", NOT_KNOWN)]
    os_text = " ".join(x for x in (h.kernel, h.machine) if x)
    if h.kernel_version:
        os_text += f" ({h.kernel_version})"
    cpus = str(h.cpus_online) if h.cpus_online is not None else ""
    if cpus and h.cpus_online_list:
        cpus += f" online ({h.cpus_online_list})"
    affinity = cpu_ranges(h.trainer_affinity or h.affinity or [])
    cgroup = [
        f"CPU quota {h.cpu_quota:g} CPUs" if h.cpu_quota is not None else "no CPU quota",
        f"memory {h.memory_limit / 2**30:.1f} GiB"
        if h.memory_limit is not None
        else "no memory limit",
    ]
    if h.cgroup:
        cgroup.append(f"cgroup {h.cgroup}")
    gpu = "; ".join(h.gpus) if h.gpus else "none found"
    if h.gpu_driver:
        gpu += f" (NVIDIA driver {h.gpu_driver})"
    env_text = " ".join(f"{k}={v}" for k, v in h.env.items())
    load_text = " ".join(f"{x:.2f}" for x in h.load or [])
    return [
        ("OS / kernel", os_text or NOT_KNOWN),
        ("libc", h.libc or NOT_KNOWN),
        ("compiler", h.compiler or NOT_KNOWN),
        ("CPUs", cpus or NOT_KNOWN),
        ("affinity", affinity or NOT_KNOWN),
        ("cgroup limits", ", ".join(cgroup)),
        ("container", "; ".join(h.container) if h.container else "no hint of one"),
        ("load average", load_text or NOT_KNOWN),
        ("GPU", gpu),
        ("OpenMP runtime", h.openmp_runtime or NOT_KNOWN),
        ("threading env", env_text or "none set"),
    ]


def commit_of(result: TriageResult) -> str | None:
    """The commit the failure was reproduced at, where a step recorded one: History's bad
    end (Reproduce records no commit of its own)."""
    return result.found(HistoryResult).bad or None


def step_of(result: TriageResult, name: TriageStep) -> Step:
    """The step, or a pending one when the triage has none of that name (an old file)."""
    return next((s for s in result.steps if s.name is name), Step(name=name))


# what a run folder is shown by, best first: a run's page, a table's page, then its data
FOLDER_PAGES = (
    REPORT_HTML,
    INDEX_HTML,
    REPEAT_JSON,
    table_json(TableKind.COMPARE),
    table_json(TableKind.SWEEP),
    table_json(TableKind.BISECT),
    REPORT_MD,
    REPORT_JSON,
)


class Evidence:
    """Links from triage.html (in `root`) to the files behind its claims: only regular files
    inside `root` that exist now."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def file(self, where: object) -> str | None:
        """`where` (relative to root, or absolute inside it) as a link target, or None."""
        if not isinstance(where, str) or not where or "\0" in where:
            return None
        path = Path(where)
        if path.is_absolute():
            for base in (self.root, self.root.resolve()):
                if path.is_relative_to(base):
                    path = path.relative_to(base)
                    break
            else:
                return None
        rel = path.as_posix()
        if rel in ("", ".") or not is_inside(self.root, rel):
            return None
        return rel if (self.root / rel).is_file() else None

    def target(self, where: object, prefer: str = "") -> str | None:
        """The evidence at `where` (its file `prefer` when there is one), or None."""
        found = None
        if prefer and isinstance(where, str) and where:
            found = self.file(str(PurePosixPath(where.rstrip("/")) / prefer))
        return found or self.page_of(where)

    def page_of(self, where: object) -> str | None:
        """A file, or a run folder's best page (FOLDER_PAGES), as a link target."""
        if not isinstance(where, str) or not where:
            return None
        if not where.endswith("/") and self.file(where):
            return self.file(where)
        for name in FOLDER_PAGES:
            found = self.file(str(PurePosixPath(where.rstrip("/")) / name))
            if found:
                return found
        return None
