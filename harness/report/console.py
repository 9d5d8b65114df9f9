"""The one-screen terminal summary of a report, with one `next` line: what to look at or run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harness import outcome
from harness.filenames import OUTPUT_LOG, REPORT_JSON, REPORT_MD, STACKS_TXT
from harness.outcome import Kind
from harness.report.model import Report
from harness.source.blame import HangBlame
from harness.text import terminal_safe
from harness.vocab import CheckStatus


def invoked_as(argv0: str | None = None) -> str:
    """How the reader runs the harness again, as this process was run: `harness` when that
    is what the shell finds, else the path it was started by (`.venv/bin/harness` after
    setup.sh, which puts nothing on PATH), or `python -m harness`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name == "__main__.py" and Path(argv0).parent.name == "harness":
        return f"{_short(sys.executable)} -m harness"
    if Path(argv0).name != "harness":
        return "harness"
    on_path = shutil.which("harness")
    try:
        if on_path and Path(on_path).resolve() == Path(argv0).resolve():
            return "harness"
    except OSError:
        pass
    return _short(argv0) if "/" in argv0 else "harness"


def _short(path: str) -> str:
    """A path relative to the working folder when it is under it (`.venv/bin/python`)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except (ValueError, OSError):
        return path


def as_invoked(command: str) -> str:
    """A suggested `harness …` command, spelled the way this harness was started."""
    name = invoked_as()
    if name != "harness" and command.startswith("harness "):
        return name + command[len("harness") :]
    return command


def next_step(r: Report, kind: str) -> str:
    """One thing the reader can do now with what this run found; it names only files that
    exist (a --no-sample hang has no stacks.txt)."""
    where = r.directory
    stacks = where / STACKS_TXT
    look = f"stacks: {stacks}; " if stacks.exists() else ""
    v = r.verdict
    command = next((c.command for c in (v.causes if v else [])[:1] if c.command), "")
    if command:
        return f"{look}{as_invoked(command)}"
    if kind == Kind.HANG and v is not None and v.compare:
        return f"{look}does the fix help? {as_invoked(v.compare)}"
    if kind == Kind.HANG:
        if stacks.exists():
            return f"every thread's stack: {stacks}"
        return f"the command's whole output: {where / OUTPUT_LOG}"
    if kind in (Kind.CRASH, Kind.ERROR_EXIT):
        return f"the command's whole output: {where / OUTPUT_LOG}"
    if kind == Kind.CHECK_FAILED:
        # report.md may be what a full disk left unwritten; report.json is written first
        md = where / REPORT_MD
        shown = md if md.exists() else where / REPORT_JSON
        return f"every check with its observed value and bound: {shown}"
    if r.hazards is not None and r.hazards.hazards:
        md = where / REPORT_MD
        shown = md if md.exists() else where / REPORT_JSON
        return f"each hazard's stacks, threads and locks: {shown}"
    if kind == Kind.BUILD_FAILED and r.build:
        return f"the build log: {r.build.log_path}"
    return ""


def count(x: float) -> str:
    """A count as the trainer meant it: 1,048,576 steps, not the dashboard's 1.05M."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.2f}"


def observed(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def trigger_text(r: Report) -> str:
    """When the watchdog fired, apart from the sampling that followed it."""
    run_s = r.timings.run_s or 0.0
    sampling = r.timings.sampling_s or 0.0
    text = f"{r.trigger} after {run_s - sampling:.1f}s"
    window = None
    if r.limits is not None:
        window = {
            "startup": r.limits.startup_s,
            "stall": r.limits.stall_s,
            "wall": r.limits.wall_s,
            "quiescent": r.limits.quiescent_s,
        }
        window_s = window.get(r.trigger or "")
        text += f" ({r.trigger} window {window_s:g}s)" if window_s is not None else ""
    if sampling:
        text += f"; sampling {sampling:.1f}s"
    return text


def blame_text(b: HangBlame) -> str:
    """`vecenv.h:190 last changed in <sha> "<subject>" (<author>, <date>)`, and the pragma's."""
    parts = []
    if b.commit is not None:
        c = b.commit
        parts.append(
            f'{b.file}:{b.line} last changed in {c.short} "{c.subject}" ({c.author}, {c.date})'
        )
    elif b.reason:
        parts.append(f"{b.file}:{b.line}: {b.reason}")
    if b.pragma_introduced is not None:
        c = b.pragma_introduced
        parts.append(
            f'its pragma came in {c.short} "{c.subject}" ({c.author}, {c.date}; {c.how_found})'
        )
    return "; ".join(parts)


def shown(value: object) -> str:
    """Report text for the box: its terminal controls removed (the trainer's bytes reach the
    report as evidence, summaries, paths and names), then escaped as rich markup."""
    return escape(terminal_safe(str(value)))


def short(x: float) -> str:
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= limit:
            return f"{x / limit:.2f}{suffix}"
    return f"{x:g}"


def print_summary(r: Report, stream: TextIO | None = None) -> None:
    console = Console(file=stream, highlight=False, soft_wrap=False)
    v = r.verdict
    kind = r.kind
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("verdict", f"[{outcome.style(kind)}]{kind}[/]")
    if v is not None:
        table.add_row("summary", shown(v.summary))
    if r.hazards is not None:  # on a pass too: what could hang on another host or run
        table.add_row("hazards", shown(r.hazards.line()))
    if v is not None:
        if v.mechanism:
            table.add_row("mechanism", shown(v.mechanism))
        if v.location:
            table.add_row("location", shown(v.location))
        if v.location_frames:
            table.add_row("frames", shown(" → ".join(v.location_frames[-6:])))
        if v.waits_for and not v.wake_chain:  # one chain: the graph's, when there is one
            table.add_row("waits", shown(v.waits_for))
        if v.wake_chain:
            table.add_row("chain", shown(v.wake_chain))
        if v.causes:
            top = v.causes[0]
            table.add_row(
                "cause",
                f"[bold]{shown(top.id)}[/] ({shown(top.confidence)}): {shown(top.sentence)}",
            )
            more = len(v.causes) - 1
            if more:
                table.add_row("", f"... {more} more cause(s) in report.md")
        if v.blame is not None:
            table.add_row("blame", shown(blame_text(v.blame)))
    if r.pin:
        table.add_row("pin", shown(f"{r.pin.name} ({r.pin.verification_status or '-'})"))
    if r.variant:
        table.add_row("variant", shown(r.variant.spec))
    if r.trigger:
        table.add_row("trigger", shown(trigger_text(r)))
    # the trainer's end-of-run record is exact where the dashboard rounds
    last = {**r.progress.last_metrics, **r.progress.final_metrics}
    if last:
        trained = [f"{k} {count(last[k])}" for k in ("epoch", "agent_steps") if k in last]
        if r.progress.measured_sps:
            trained.append(f"mean SPS {short(r.progress.measured_sps)}")
        table.add_row("trained", ", ".join(trained) or "-")
    failed = [c for c in r.checks if c.status == CheckStatus.FAIL]
    if r.checks:
        context = (
            ""
            if kind in (Kind.PASS, Kind.CHECK_FAILED)
            else " (context only: the run did not finish)"
        )
        table.add_row("checks", f"{len(r.checks) - len(failed)}/{len(r.checks)} passed{context}")
    if kind == Kind.CHECK_FAILED:
        for c in failed[:6]:
            detail = shown(f"{c.name}: observed {observed(c.observed)}, bound {c.bound}")
            table.add_row("", f"[yellow]✗[/] {detail}")
        if len(failed) > 6:
            table.add_row("", f"... {len(failed) - 6} more in report.md")
    elif v is not None:
        for line in v.beside_chain[: 3 if v.causes else 6]:  # a cause says the rest
            safe = terminal_safe(line)
            table.add_row("", escape(safe if len(safe) < 200 else safe[:197] + "..."))
    console.print(Panel(table, title=shown(f"harness {r.mode}: {r.title}"), expand=False))
    # paths are printed whole, outside the box: a box is cut to the terminal's width (80
    # columns without a terminal) and a cut path cannot be opened
    stream_out = console.file
    print(f"report: {terminal_safe(str(r.directory))}", file=stream_out)
    hint = terminal_safe(next_step(r, kind))
    if hint:
        print(f"next:   {hint}", file=stream_out)
    stream_out.flush()
