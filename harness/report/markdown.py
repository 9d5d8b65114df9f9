"""Markdown: one table writer with one escaping rule (used by report.md, compare.md and
bisect.md), and report.md itself. Every value that is not the harness's own words goes
through `harness.text` (`md`, `code`): the trainer's output, names and paths render as the
text they are, never as HTML, links, headings or a broken table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from harness.filenames import JUNIT_XML, OUTPUT_LOG, REPORT_JSON, SAMPLES_JSON, STACKS_TXT
from harness.report.model import Report
from harness.text import markdown_code as code
from harness.text import markdown_text


def md(value: object, paragraph: bool = False) -> str:
    """Report text as Markdown text (`paragraph`: it starts a paragraph or a list item)."""
    return markdown_text(str(value), paragraph=paragraph)


def value_text(value: object) -> str:
    """A value as a table shows it, in any format: None is '-', a float short, a bool yes/no."""
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def cell(value: object) -> str:
    """A table cell: a pipe is escaped, line breaks become spaces (a raw newline or pipe
    would end the row or add a column), and the rest escaped as Markdown text."""
    return markdown_text(value_text(value), paragraph=False) or "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def pairs(values: Mapping[str, object]) -> str:
    """`key value, key value` for a small mapping, rounding floats; '-' when empty."""
    shown = []
    for k, v in values.items():
        if v is None:
            continue
        shown.append(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}")
    return ", ".join(shown) or "-"


def _exit_text(r: Report) -> str:
    return (r.exit.describe() if r.exit else "") or "-"


def render_report(r: Report) -> str:
    v = r.verdict
    lines = [f"# harness {r.mode}: {md(r.title)}", ""]
    if v is not None:
        lines += [f"**Verdict: {md(v.kind)}** — {md(v.summary)}", ""]
        if v.mechanism:
            lines.append(f"- mechanism: {md(v.mechanism)}")
        if v.location:
            lines.append(f"- location: {code(v.location)}")
        if v.location_frames:
            lines.append(f"- frames: {code(' → '.join(v.location_frames))}")
        if v.waits_for and not v.wake_chain:  # one chain: the graph's, when there is one
            lines.append(f"- waits: {md(v.waits_for)}")
        if v.wake_chain:
            lines.append(f"- chain: {md(v.wake_chain)}")
        if v.causes:
            lines += ["", "## Causes", ""]
            for c in v.causes:
                lines += [f"### {md(c.id)} ({md(c.confidence)})", "", md(c.sentence, True), ""]
                lines += [f"- evidence: {md(e)}" for e in c.evidence]
                lines += [f"- try: {md(x)}" for x in c.remedies]
                lines.append("")
        if v.blame is not None or v.blame_skipped:
            lines += ["", "## Blame", ""]
            hb = v.blame
            for label, lc in (
                ("line", hb.commit if hb else None),
                ("pragma introduced", hb.pragma_introduced if hb else None),
            ):
                if lc is not None:
                    said = f'{lc.short} "{lc.subject}" ({lc.author}, {lc.date}; {lc.how_found})'
                    lines.append(f"- {label}: {code(f'{lc.file}:{lc.line}')} {md(said)}")
            reason = hb.reason if hb is not None else v.blame_skipped
            if reason:
                lines.append(f"- {md(reason, True)}")
        lines += ["", "## Evidence", ""] + [f"- {md(e, True)}" for e in v.beside_chain] + [""]
    limits = r.limits
    rows: list[tuple[str, object]] = [
        ("run id", r.run_id),
        ("status", r.status),
        ("pin", r.pin.name if r.pin else None),
        ("pin verification", r.pin.verification_status if r.pin else None),
        ("variant", r.variant.spec if r.variant else None),
        ("command", " ".join(r.command.argv) if r.command else None),
        ("cwd", r.command.cwd if r.command else None),
        ("trigger", r.trigger),
        ("exit", _exit_text(r)),
        ("limits", limits.describe() if limits else None),
        ("timings", pairs(vars(r.timings))),
        ("progress frames", r.progress.frames),
    ]
    if r.build:
        b = r.build
        state = "cache hit" if b.cache_hit else "built"
        rows.append(("build", f"{state} in {b.duration_s:.1f}s, key {b.key}"))
    lines += ["## Run", "", *table(("field", "value"), rows)]
    if r.checks:
        lines += ["", "## Checks", ""]
        lines += table(
            ("check", "status", "observed", "bound", "message"),
            ((c.name, c.status, c.observed, c.bound, c.message) for c in r.checks),
        )
    last = r.progress.last_metrics
    if last:
        lines += ["", "## Last metrics", "", *table(("key", "value"), sorted(last.items()))]
    if r.hazards is not None:
        lines += _hazard_lines(r)
    if r.notes:
        lines += ["", "## Notes", ""] + [f"- {md(n, True)}" for n in r.notes]
    present = [name for name in (REPORT_JSON, *_files(r)) if name]
    lines += ["", f"Artifacts: {', '.join(present)}", ""]
    return "\n".join(lines)


def _hazard_lines(r: Report) -> list[str]:
    """## Hazards (docs/hazards.md): the count line, then each hazard and its evidence."""
    assert r.hazards is not None
    lines = ["", "## Hazards", "", md(r.hazards.line(), paragraph=True), ""]
    for h in r.hazards.hazards:
        lines += [f"### {md(h.kind.value)} at {code(h.where)}", "", md(h.summary, True), ""]
        lines += [*table(("", ""), h.facts()), ""]
    return lines + [f"- {md(n, True)}" for n in r.hazards.notes]


def _files(r: Report) -> list[str]:
    names = [OUTPUT_LOG, JUNIT_XML]
    if r.samples is not None:
        names += [STACKS_TXT, SAMPLES_JSON]
    return [n for n in names if n == JUNIT_XML or r.artifact(n).exists()]
