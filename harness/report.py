"""Reports: reports/<run-id>/ with report.json (versioned schema, docs/report-schema.md),
report.md, junit.xml, output.log, stacks.txt, samples.json; and a one-screen terminal
summary. report.json is written atomically at every stage, so a harness that dies leaves
a partial report whose `status` says how far it got."""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, TextIO

from junit_xml import TestCase, TestSuite, to_xml_report_string
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harness import __version__
from harness.checks import CheckResult
from harness.classify import Verdict
from harness.sampler import SampleSet

SCHEMA_VERSION = 1
KIND_STYLE = {
    "pass": "bold green",
    "hang": "bold red",
    "crash": "bold red",
    "error-exit": "bold red",
    "check-failed": "bold yellow",
    "build-failed": "bold magenta",
    "timeout-progressing": "bold yellow",
    "interrupted": "bold yellow",
}


def new_run_id(label: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in label)[:40]
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(2)}"


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


@dataclass
class Report:
    run_id: str
    directory: Path
    harness_argv: list[str]
    mode: str  # "run" | "watch" | "check" | "compare" | "bisect"
    status: str = "running"  # running | complete | interrupted | failed
    stage: str = "start"  # start | pin | prepare | build | run | sample | classify | check | done
    env: str | None = None
    pin: dict[str, Any] = field(default_factory=dict)
    variant: dict[str, Any] = field(default_factory=dict)
    build: dict[str, Any] | None = None
    command: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float | None] = field(default_factory=dict)
    trigger: str | None = None
    exit: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    checks: list[CheckResult] = field(default_factory=list)
    samples: SampleSet | None = None
    cleanup: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    finished_at: str | None = None

    def artifact(self, name: str) -> Path:
        return self.directory / name

    def to_json(self) -> dict[str, Any]:
        samples = _plain(self.samples) if self.samples is not None else None
        return {
            "schema_version": SCHEMA_VERSION,
            "harness_version": __version__,
            "run_id": self.run_id,
            "mode": self.mode,
            "status": self.status,
            "stage": self.stage,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "harness_argv": self.harness_argv,
            "env": self.env,
            "pin": _plain(self.pin),
            "variant": _plain(self.variant),
            "build": _plain(self.build),
            "command": _plain(self.command),
            "limits": self.limits,
            "timings": self.timings,
            "trigger": self.trigger,
            "exit": _plain(self.exit),
            "progress": _plain(self.progress),
            "verdict": _plain(self.verdict),
            "checks": _plain(self.checks),
            "samples": samples,
            "cleanup": _plain(self.cleanup),
            "notes": self.notes,
            "artifacts": {
                name: name
                for name in ("output.log", "report.md", "junit.xml", "stacks.txt", "samples.json")
                if self.artifact(name).exists()
            },
        }

    def save(self, stage: str | None = None) -> None:
        """Write report.json now (atomically): called at every stage of a run."""
        if stage is not None:
            self.stage = stage
        atomic_write(self.artifact("report.json"), json.dumps(self.to_json(), indent=2) + "\n")

    def finish(self, status: str = "complete") -> None:
        self.status = status
        self.finished_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if self.samples is not None:
            atomic_write(self.artifact("stacks.txt"), render_stacks(self.samples))
            atomic_write(
                self.artifact("samples.json"), json.dumps(_plain(self.samples), indent=1) + "\n"
            )
        atomic_write(self.artifact("report.md"), render_markdown(self))
        atomic_write(self.artifact("junit.xml"), render_junit(self))
        self.save("done")


def render_stacks(samples: SampleSet) -> str:
    out: list[str] = []
    for st in samples.stacks:
        out.append(f"== pid {st.pid} tid {st.tid} '{st.name}' ({st.source})")
        for i, f in enumerate(st.frames):
            where = f.file or f.module or ""
            if f.file and f.line:
                where = f"{f.file}:{f.line}"
            own = " [own]" if f.own else ""
            out.append(f"  #{i:<2} {f.function}{'  ' + where if where else ''}{own}")
        out.append("")
    if samples.notes:
        out.append("notes:")
        out += [f"  {n}" for n in samples.notes]
    return "\n".join(out) + "\n"


def render_markdown(r: Report) -> str:
    v = r.verdict
    lines = [f"# harness {r.mode}: {r.env or ' '.join(r.command.get('argv', []))}", ""]
    if v is not None:
        lines += [f"**Verdict: {v.kind}** — {v.summary}", ""]
        if v.mechanism:
            lines.append(f"- mechanism: {v.mechanism}")
        if v.location:
            lines.append(f"- location: `{v.location}`")
        if v.location_frames:
            lines.append(f"- frames: `{' → '.join(v.location_frames)}`")
        lines += ["", "## Evidence", ""] + [f"- {e}" for e in v.evidence] + [""]
    lines += ["## Run", "", "| field | value |", "|---|---|"]
    rows: list[tuple[str, object]] = [
        ("run id", r.run_id),
        ("status", r.status),
        ("pin", r.pin.get("name")),
        ("pin verification", r.pin.get("verification", {}).get("status")),
        ("variant", r.variant.get("spec")),
        ("command", " ".join(r.command.get("argv", []))),
        ("cwd", r.command.get("cwd")),
        ("trigger", r.trigger),
        ("exit", r.exit),
        ("limits", r.limits),
        ("timings", {k: round(x, 2) if isinstance(x, float) else x for k, x in r.timings.items()}),
        ("progress frames", r.progress.get("frames")),
    ]
    if r.build:
        rows.append(
            (
                "build",
                f"{'cache hit' if r.build.get('cache_hit') else 'built'} "
                f"in {r.build.get('duration_s', 0):.1f}s, key {r.build.get('key')}",
            )
        )
    lines += [f"| {k} | {str(val).replace('|', '/')} |" for k, val in rows]
    if r.checks:
        lines += ["", "## Checks", "", "| check | status | observed | bound |", "|---|---|---|---|"]
        lines += [f"| {c.name} | {c.status} | {c.observed} | {c.bound} |" for c in r.checks]
    last = r.progress.get("last_metrics") or {}
    if last:
        lines += ["", "## Last metrics", "", "| key | value |", "|---|---|"]
        lines += [f"| {k} | {val} |" for k, val in sorted(last.items())]
    if r.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    lines += ["", "Artifacts: report.json, output.log, stacks.txt, samples.json, junit.xml", ""]
    return "\n".join(lines)


def render_junit(r: Report) -> str:
    name = r.env or "command"
    cases: list[TestCase] = []
    v = r.verdict
    case = TestCase(
        f"verdict[{name}]",
        classname=f"harness.{r.mode}",
        elapsed_sec=float(r.timings.get("run_s") or 0.0),
        stdout="\n".join(v.evidence) if v else "",
    )
    if v is None or v.kind not in ("pass", "check-failed"):
        kind = v.kind if v else "incomplete"
        case.add_failure_info(message=v.summary if v else "no verdict", output=kind)
    cases.append(case)
    for c in r.checks:
        cc = TestCase(f"check[{c.name}]", classname=f"harness.checks.{name}")
        if c.status == "fail":
            cc.add_failure_info(message=c.message, output=f"observed {c.observed}, bound {c.bound}")
        elif c.status == "skip":
            cc.add_skipped_info(message=c.message)
        cases.append(cc)
    return str(to_xml_report_string([TestSuite(f"harness-{r.run_id}", cases)]))


def _next_step(r: Report, kind: str) -> str:
    """One thing the reader can do now with what this run found."""
    where = r.directory
    if kind == "hang" and "fixed" in r.pin.get("variants", {}):
        return (
            f"stacks: {where / 'stacks.txt'}; does the fix help? "
            f"harness compare {r.env} --variants {r.variant.get('spec', 'stock')},fixed"
        )
    if kind == "hang":
        return f"every thread's stack: {where / 'stacks.txt'}"
    if kind in ("crash", "error-exit"):
        return f"the command's whole output: {where / 'output.log'}"
    if kind == "check-failed":
        return f"every check with its observed value and bound: {where / 'report.md'}"
    if kind == "build-failed" and r.build:
        return f"the build log: {r.build.get('log_path')}"
    return ""


def _short(x: float) -> str:
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= limit:
            return f"{x / limit:.2f}{suffix}"
    return f"{x:g}"


def print_summary(r: Report, stream: TextIO | None = None) -> None:
    console = Console(file=stream, highlight=False, soft_wrap=False)
    v = r.verdict
    kind = v.kind if v else r.status
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("verdict", f"[{KIND_STYLE.get(kind, 'bold')}]{kind}[/]")
    if v is not None:
        table.add_row("summary", escape(v.summary))
        if v.mechanism:
            table.add_row("mechanism", v.mechanism)
        if v.location:
            table.add_row("location", escape(v.location))
        if v.location_frames:
            table.add_row("frames", escape(" → ".join(v.location_frames[-6:])))
    table.add_row(
        "pin", f"{r.pin.get('name', '-')} ({r.pin.get('verification', {}).get('status', '-')})"
    )
    if r.variant:
        table.add_row("variant", escape(str(r.variant.get("spec"))))
    table.add_row("trigger", f"{r.trigger} after {r.timings.get('run_s') or 0:.1f}s")
    last = r.progress.get("last_metrics") or {}
    if last:
        trained = [f"{k} {_short(last[k])}" for k in ("epoch", "agent_steps") if k in last]
        if r.progress.get("measured_sps"):
            trained.append(f"mean SPS {_short(r.progress['measured_sps'])}")
        table.add_row("trained", ", ".join(trained) or "-")
    failed = [c for c in r.checks if c.status == "fail"]
    if r.checks:
        context = (
            "" if kind in ("pass", "check-failed") else " (context only: the run did not finish)"
        )
        table.add_row("checks", f"{len(r.checks) - len(failed)}/{len(r.checks)} passed{context}")
    if kind == "check-failed":
        for c in failed[:6]:
            detail = escape(f"{c.name}: observed {c.observed}, bound {c.bound}")
            table.add_row("", f"[yellow]✗[/] {detail}")
        if len(failed) > 6:
            table.add_row("", f"... {len(failed) - 6} more in report.md")
    elif v is not None:
        for line in v.evidence[:6]:
            table.add_row("", escape(line if len(line) < 200 else line[:197] + "..."))
    table.add_row("report", escape(str(r.directory)))
    hint = _next_step(r, kind)
    if hint:
        table.add_row("next", escape(hint))
    console.print(Panel(table, title=escape(f"harness {r.mode}: {r.env or ''}"), expand=False))
