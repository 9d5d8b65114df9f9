"""What a triage's steps recorded, read for people: the readers both tellings share
(story_html: triage.html; story_issue: issue.md).

A step's `result` came from runs (the trainer's output, frame names, commit subjects) and
from an engine that may not fill every key: each value is read here as optional and checked
for its type, and a missing one is said "not known", never guessed. `Evidence` says which
files behind a claim exist: regular files inside the triage folder, as they are now."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from harness import outcome
from harness.contain import is_inside
from harness.filenames import (
    INDEX_HTML,
    REPEAT_JSON,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    table_json,
)
from harness.triage.model import Step, TriageResult
from harness.vocab import StepStatus, TableKind, TriageStep

NOT_KNOWN = "not known"


def known(value: object) -> bool:
    return value is not None and value != "" and value != [] and value != {}


def pick(result: Mapping[str, Any], key: str) -> Any:
    """A value of a step's result; None when missing or empty."""
    value = result.get(key) if isinstance(result, Mapping) else None
    return value if known(value) else None


def word(result: Mapping[str, Any], key: str) -> str | None:
    """A scalar value as text (a number, a string); None for a missing one or a container."""
    value = pick(result, key)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def entries(result: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """A list of objects in a result (causes, knobs, variants …); anything else dropped."""
    value = pick(result, key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def strings(value: object) -> list[str]:
    """A list of lines (changes, frames, waits): strings kept, objects as their line or text."""
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for v in value:
        if isinstance(v, str) and v:
            out.append(v)
        elif isinstance(v, Mapping):
            line = next((v[k] for k in ("line", "text", "summary", "what") if v.get(k)), None)
            if isinstance(line, str):
                out.append(line)
    return out


def scalars(value: object, key: str = "") -> list[str]:
    """A list of values (a knob's values, possible commits) as text; an object gives its
    `key` when it has one."""
    if not isinstance(value, list):
        return []
    out = []
    for v in value:
        if isinstance(v, Mapping) and key:
            v = v.get(key)
        if isinstance(v, str | int | float) and not isinstance(v, bool) and v != "":
            out.append(str(v))
    return out


def seconds(value: object) -> str:
    s = num(value)
    if s is None:
        return NOT_KNOWN
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def pct(value: float) -> str:
    return f"{value:.0%}"


def step_state(step: Step) -> str:
    """The step's state in a few words: "done in 41 s (estimated 60 s)", "skipped: budget"."""
    estimate = f"estimated {seconds(step.estimate_s)}" if num(step.estimate_s) else ""
    if step.status is StepStatus.DONE:
        took = f" in {seconds(step.duration_s)}" if num(step.duration_s) is not None else ""
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


def rate_text(result: Mapping[str, Any]) -> str | None:
    """The rate in words: "4/4 runs failed (100%, 95% interval 51%–100%): 4 hang"; None
    without runs."""
    runs = num(pick(result, "runs"))
    counts = pick(result, "counts")
    counts = (
        {str(k): int(n) for k, n in counts.items() if num(n)} if isinstance(counts, Mapping) else {}
    )
    rate = num(pick(result, "failure_rate"))
    if runs is None and counts:
        runs = float(sum(counts.values()))
    if runs is None:
        return None
    if counts:
        failed = sum(n for k, n in counts.items() if outcome.reproduces(k))
    elif rate is not None:
        failed = round(rate * runs)
    else:
        return f"{runs:.0f} runs"
    text = f"{failed}/{runs:.0f} runs failed"
    ci = pick(result, "failure_rate_ci95")
    bounds = [num(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 else []
    if rate is not None:
        interval = ""
        if len(bounds) == 2 and None not in bounds:
            interval = f", 95% interval {pct(bounds[0] or 0.0)}–{pct(bounds[1] or 0.0)}"
        text += f" ({pct(rate)}{interval})"
    if counts:
        text += ": " + ", ".join(f"{n} {k}" for k, n in counts.items())
    return text


def cause_line(cause: Mapping[str, Any]) -> str:
    """One line for a cause object: "openmp-after-fork: OpenMP used after fork (high
    confidence): the sentence"."""
    parts = [w for k in ("id", "title") if (w := word(cause, k))]
    head = ": ".join(dict.fromkeys(parts))  # a title that is the id is said once
    confidence = cause.get("confidence")
    if isinstance(confidence, str) and confidence:
        head += f" ({confidence} confidence)"
    elif (score := num(confidence)) is not None and 0 <= score <= 1:
        head += f" ({pct(score)})"
    sentence = cause.get("sentence")
    if isinstance(sentence, str) and sentence:
        head = f"{head}: {sentence}" if head else sentence
    return head or NOT_KNOWN


def ranges(cpus: object) -> str | None:
    """[0, 1, 2, 5] as "0-2,5"."""
    if not isinstance(cpus, list) or not all(isinstance(c, int) for c in cpus) or not cpus:
        return None
    ordered = sorted(set(cpus))
    spans: list[str] = []
    start = prev = ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(spans)


def host_facts(host: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The host fingerprint (doctor/fingerprint.py) as (label, plain text) pairs."""
    h = host if isinstance(host, Mapping) else {}
    os_text = " ".join(x for x in (word(h, "kernel"), word(h, "machine")) if x)
    if word(h, "kernel_version"):
        os_text += f" ({word(h, 'kernel_version')})"
    cpus = word(h, "cpus_online")
    if cpus and word(h, "cpus_online_list"):
        cpus += f" online ({word(h, 'cpus_online_list')})"
    affinity = ranges(pick(h, "trainer_affinity")) or ranges(pick(h, "affinity"))
    quota = num(pick(h, "cpu_quota"))
    memory = num(pick(h, "memory_limit"))
    cgroup = [
        f"CPU quota {quota:g} CPUs" if quota is not None else "no CPU quota",
        f"memory {memory / 2**30:.1f} GiB" if memory is not None else "no memory limit",
    ]
    if word(h, "cgroup"):
        cgroup.append(f"cgroup {word(h, 'cgroup')}")
    container = strings(pick(h, "container"))
    gpus = strings(pick(h, "gpus"))
    gpu = "; ".join(gpus) if gpus else "none found"
    if word(h, "gpu_driver"):
        gpu += f" (NVIDIA driver {word(h, 'gpu_driver')})"
    env = pick(h, "env")
    env_text = (
        " ".join(f"{k}={v}" for k, v in env.items() if isinstance(v, str))
        if isinstance(env, Mapping)
        else ""
    )
    load = pick(h, "load")
    load_text = (
        " ".join(f"{x:.2f}" for x in load if num(x) is not None) if isinstance(load, list) else ""
    )
    if not h:
        return [("host", NOT_KNOWN)]
    return [
        ("OS / kernel", os_text or NOT_KNOWN),
        ("libc", word(h, "libc") or NOT_KNOWN),
        ("compiler", word(h, "compiler") or NOT_KNOWN),
        ("CPUs", cpus or NOT_KNOWN),
        ("affinity", affinity or NOT_KNOWN),
        ("cgroup limits", ", ".join(cgroup)),
        ("container", "; ".join(container) if container else "no hint of one"),
        ("load average", load_text or NOT_KNOWN),
        ("GPU", gpu),
        ("OpenMP runtime", word(h, "openmp_runtime") or NOT_KNOWN),
        ("threading env", env_text or "none set"),
    ]


def commit_of(result: TriageResult) -> str | None:
    """The commit the failure was reproduced at, where a step recorded one."""
    for name, key in ((TriageStep.REPRODUCE, "commit"), (TriageStep.HISTORY, "bad")):
        value = word(step_of(result, name).result, key)
        if value:
            return value
    return None


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
