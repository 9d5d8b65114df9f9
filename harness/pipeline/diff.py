"""`harness diff A B`: two runs side by side, "it hangs there, not here" as data. Each of A
and B is a report (its folder or report.json) or a repeat aggregate (its folder or
repeat.json); an aggregate stands for its runs' rates, with the settings and host of its
first run's report.

The result lists what differs that could matter, in the order a reader should check it:
the host (the CPU affinity the trainer got first: a tree sized from one CPU count and
waiting on a barrier sized from another hangs on one host only), the pin and source hashes,
the variant, the trainer's arguments and environment, the knobs among its arguments, the
build, the conditions the run imposed, the run's own settings; next to how the verdicts
differ (kind, mechanism, location, top cause; or the rates, with their 95% intervals).

Exit codes, like diff(1) (outcome.DiffExit): SAME (0) when the verdicts are the same (two
rates that are not separated at 95% count as the same, with a note of how many runs would
settle it), DIFFERENT (1) when they differ, USAGE (5) for input that is not a report or an
aggregate.
Reading the two sides (bounded, inside their folders) is diffsides'; this module compares."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.doctor.fingerprint import compare_fingerprints, shown
from harness.execute.conditions import HostConditions
from harness.outcome import DiffExit
from harness.pipeline.diffsides import Side, read_side
from harness.pipeline.workdir import WORKDIR
from harness.report.model import Report, plain
from harness.stats import runs_to_separate, separated

__all__ = [
    "SCHEMA_VERSION",
    "Change",
    "DiffResult",
    "Side",
    "VerdictRow",
    "compare_verdicts",
    "diff_paths",
    "diff_sides",
    "read_side",
    "settings_changes",
]

SCHEMA_VERSION = 1  # of `harness diff --json`


@dataclass(frozen=True)
class Change:
    """One thing that differs between A and B: its section (host, source, variant, args,
    env, knobs, build, conditions, run), its key in that section, and the two values as
    text ("" when absent on that side)."""

    section: str
    key: str
    a: str
    b: str


@dataclass
class VerdictRow:
    key: str
    a: str
    b: str

    @property
    def differs(self) -> bool:
        return self.a != self.b

    def to_json(self) -> dict[str, Any]:
        return {**plain(self), "differs": self.differs}


@dataclass
class DiffResult:
    a: Side
    b: Side
    changes: list[Change]  # what differs that could matter, in the order to check it
    verdicts: list[VerdictRow]
    verdicts_differ: bool
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return DiffExit.DIFFERENT if self.verdicts_differ else DiffExit.SAME

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "differences": plain(self.changes),
            "verdicts": [v.to_json() for v in self.verdicts],
            "verdicts_differ": self.verdicts_differ,
            "notes": list(self.notes),
            "exit_code": self.exit_code,
        }


def diff_paths(a: Path, b: Path) -> DiffResult:
    """Read A and B (a report or an aggregate each) and compare them."""
    return diff_sides(read_side(a), read_side(b))


def diff_sides(a: Side, b: Side) -> DiffResult:
    notes = [f"A: {n}" for n in a.notes] + [f"B: {n}" for n in b.notes]
    changes: list[Change] = []
    if a.report is not None and b.report is not None:
        changes = settings_changes(a.report, b.report)
    rows, differ, said = compare_verdicts(a, b)
    return DiffResult(a, b, changes, rows, differ, notes + said)


# ------------------------------------------------------------------------- verdicts


def compare_verdicts(a: Side, b: Side) -> tuple[list[VerdictRow], bool, list[str]]:
    """The verdict rows, whether the verdicts differ, and notes. Two single reports differ
    in any of kind, mechanism, location and top cause. Where a side stands for repeated
    runs, the rates decide: they differ when the hang or failure rates are separated at 95%
    (stats.separated) or when both sides failed and no failure signature is shared."""
    if a.verdict is not None and b.verdict is not None:
        rows = [
            VerdictRow("kind", a.verdict.kind, b.verdict.kind),
            VerdictRow("mechanism", a.verdict.mechanism or "", b.verdict.mechanism or ""),
            VerdictRow("location", a.verdict.location or "", b.verdict.location or ""),
            VerdictRow("top cause", a.verdict.cause or "", b.verdict.cause or ""),
        ]
        return rows, any(r.differs for r in rows), []
    rows = [
        VerdictRow("runs", str(a.runs), str(b.runs)),
        VerdictRow("hang rate", a.hang.text(), b.hang.text()),
        VerdictRow("failure rate", a.failure.text(), b.failure.text()),
        VerdictRow("counts", _counts(a), _counts(b)),
        VerdictRow("top failure", _top(a), _top(b)),
    ]
    notes: list[str] = []
    differ = False
    pairs = [("hang", a.hang, b.hang), ("failure", a.failure, b.failure)]
    if (a.failure, b.failure) == (a.hang, b.hang):  # every failure a hang: say it once
        pairs = pairs[:1]
    for name, ra, rb in pairs:
        low, high = (ra, rb) if ra.value <= rb.value else (rb, ra)
        if separated(low, high):
            differ = True
            notes.append(f"the {name} rates are separated at 95%: {ra.text()} vs {rb.text()}")
        elif low.value != high.value and low.runs and high.runs:
            more = runs_to_separate(low, high)
            settle = (
                f"about {more} runs a side would settle it if the rates held"
                if more
                else "no number of runs would settle it at these rates"
            )
            notes.append(f"the {name} rates are not separated at 95%: {settle}")
    if a.signatures and b.signatures and not set(a.signatures) & set(b.signatures):
        differ = True
        notes.append("both failed, with no failure signature in common")
    return rows, differ, notes


def _counts(side: Side) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(side.counts.items(), key=lambda kv: -kv[1]))


def _top(side: Side) -> str:
    return side.signatures[0].text() if side.signatures else ""


# ------------------------------------------------------------------------- settings


def settings_changes(a: Report, b: Report) -> list[Change]:
    """What differs between the settings of two reports that could change a verdict, in the
    order to check it (module docstring). Paths that only name where a run's tree or report
    happened to be are shown as `<tree>` and `<report>`, so two hosts' cache folders do not
    count as a difference."""
    out: list[Change] = []

    def add(section: str, key: str, va: object, vb: object) -> None:
        ta, tb = shown(va), shown(vb)
        if ta != tb:
            out.append(Change(section, key, ta, tb))

    if a.host is not None and b.host is not None:
        out += [Change("host", *row) for row in compare_fingerprints(a.host, b.host)]
    elif (a.host is None) != (b.host is None):
        add("host", "fingerprint", _recorded(a.host), _recorded(b.host))
    add("host", "hostname", a.harness_host, b.harness_host)
    _source(a, b, add)
    va, vb = a.variant, b.variant
    add("variant", "spec", va.spec if va else None, vb.spec if vb else None)
    add("variant", "steps", va.steps if va else None, vb.steps if vb else None)
    add("variant", "changes", va.changes if va else None, vb.changes if vb else None)
    args_a, knobs_a = _split_knobs(_argv(a))
    args_b, knobs_b = _split_knobs(_argv(b))
    add("args", "argv", shlex.join(args_a), shlex.join(args_b))
    ca, cb = a.command, b.command
    add("args", "cwd", _cwd(a, ca.cwd) if ca else None, _cwd(b, cb.cwd) if cb else None)
    add("args", "steps", ca.steps if ca else None, cb.steps if cb else None)
    env_a, env_b = (ca.env if ca else {}), (cb.env if cb else {})
    for key in sorted(set(env_a) | set(env_b)):
        add("env", key, env_a.get(key), env_b.get(key))
    for key in sorted(set(knobs_a) | set(knobs_b)):
        add("knobs", key, knobs_a.get(key), knobs_b.get(key))
    ba, bb = a.build, b.build
    add("build", "key", ba.key if ba else None, bb.key if bb else None)
    add("build", "ok", ba.ok if ba else None, bb.ok if bb else None)
    tools_a, tools_b = (ba.toolchain if ba else {}), (bb.toolchain if bb else {})
    for key in sorted(set(tools_a) | set(tools_b)):
        add("build", f"toolchain.{key}", tools_a.get(key), tools_b.get(key))
    # none recorded (an older report) is the host as it was: no condition imposed
    cond_a = (a.conditions or HostConditions()).to_json()
    cond_b = (b.conditions or HostConditions()).to_json()
    for key in sorted(set(cond_a) | set(cond_b)):
        add("conditions", key, cond_a.get(key), cond_b.get(key))
    add("run", "env", a.env, b.env)
    add("run", "mode", a.mode, b.mode)
    add("run", "parser", ca.parser if ca else None, cb.parser if cb else None)
    la, lb = a.limits, b.limits
    for key in ("wall_s", "startup_s", "stall_s", "quiescent_s"):
        add("run", key, getattr(la, key, None), getattr(lb, key, None))
    return out


def _recorded(host: object) -> str:
    return "recorded" if host is not None else "not recorded (an older report)"


def _source(a: Report, b: Report, add: Callable[[str, str, object, object], None]) -> None:
    """The pin and the source it verified: the pin's name and source table, the commit
    found, uncommitted changes, and each pinned file's hash."""
    pa, pb = a.pin, b.pin
    add("source", "pin", pa.name if pa else None, pb.name if pb else None)
    src_a, src_b = (pa.source if pa else {}), (pb.source if pb else {})
    for key in sorted(set(src_a) | set(src_b)):
        add("source", f"pin.source.{key}", src_a.get(key), src_b.get(key))
    ver_a = (pa.verification if pa else None) or {}
    ver_b = (pb.verification if pb else None) or {}
    add("source", "verification", ver_a.get("status"), ver_b.get("status"))
    add("source", "commit", ver_a.get("commit_actual"), ver_b.get("commit_actual"))
    add("source", "uncommitted", _count(ver_a.get("dirty")), _count(ver_b.get("dirty")))
    files_a, files_b = _file_hashes(ver_a), _file_hashes(ver_b)
    for path in sorted(set(files_a) | set(files_b)):
        add("source", f"file {path}", files_a.get(path), files_b.get(path))


def _count(items: object) -> int | None:
    return len(items) if isinstance(items, list) and items else None


def _file_hashes(verification: dict[str, Any]) -> dict[str, str]:
    """Pinned file → the hash found (a verification's `files`, hand-edited or not)."""
    files = verification.get("files")
    out: dict[str, str] = {}
    for f in files if isinstance(files, list) else []:
        if isinstance(f, dict) and isinstance(f.get("path"), str):
            out[f["path"]] = str(f.get("actual") or "missing")
    return out


def _argv(report: Report) -> list[str]:
    return [_norm(report, a) for a in report.command.argv] if report.command else []


def _cwd(report: Report, cwd: str) -> str:
    """The trainer's working folder, normalized; the harness's own `<report>/workdir` (the
    tree's entries, linked: pipeline/workdir.py) is the tree, as a report from before it
    says: not a difference that could matter."""
    said = _norm(report, cwd)
    return "<tree>" if said == f"<report>/{WORKDIR}" else said


def _norm(report: Report, text: str) -> str:
    """`text` with the build tree and the run's report folder as `<tree>` and `<report>`."""
    if report.build is not None and str(report.build.tree) not in ("", "."):
        text = text.replace(str(report.build.tree), "<tree>")
    return re.sub(rf"\S*/{re.escape(report.run_id)}(?=/|$|\s)", "<report>", text)


_KNOB = re.compile(r"--([\w-]+\.[\w.-]+)(?:=(.*))?$")


def _split_knobs(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The trainer's arguments apart from its config knobs (`--section.key value` or
    `--section.key=value`, what `sweep --set` varies), and the knobs by name."""
    rest: list[str] = []
    knobs: dict[str, str] = {}
    i = 0
    while i < len(argv):
        m = _KNOB.match(argv[i])
        if m is None:
            rest.append(argv[i])
        elif m.group(2) is not None:
            knobs[f"--{m.group(1)}"] = m.group(2)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            knobs[f"--{m.group(1)}"] = argv[i + 1]
            i += 1
        else:
            knobs[f"--{m.group(1)}"] = ""
        i += 1
    return rest, knobs
