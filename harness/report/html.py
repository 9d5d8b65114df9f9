"""report.html: one self-contained page per run (inline CSS, JS and SVG, no URL of any kind:
it opens offline from a CI artifact), and index.html for commands of several runs.

The page reads top-down in the order a reader needs it: the verdict (summary, top cause,
mechanism, location, frames), the timeline (html_timeline), the merged stack tree of the
threads (html_stacks), the checks, the pin's verification with its hashes, the build, the
output's tail and the folder's other files. Every string from the trainer or the user is
escaped (html.escape); the shared pieces are in html_page."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.filenames import REPORT_HTML, REPORT_JSON
from harness.outcome import Kind
from harness.report.html_page import code, e, facts, kind_class, page, section, table
from harness.report.html_stacks import render_stack_tree
from harness.report.html_timeline import render_timeline
from harness.report.model import Report
from harness.report.runs import RunRow
from harness.text import html_text as escape
from harness.vocab import AxisKind, CheckStatus, FileStatus, RunStatus

# ---------------------------------------------------------------- the verdict


def _fields_of(cause: Any) -> Mapping[str, Any]:
    if is_dataclass(cause) and not isinstance(cause, type):
        return {f.name: getattr(cause, f.name) for f in fields(cause)}
    return cause if isinstance(cause, Mapping) else {}


def cause_text(cause: Any) -> str:
    """One line for a cause, whatever its shape (a string, a mapping, a dataclass): its
    sentence (or summary, name…), why, and how sure (a word, or a fraction as a percent)."""
    if isinstance(cause, str):
        return cause
    data = _fields_of(cause)
    keys = ("sentence", "summary", "title", "name", "cause", "id")
    head = next((str(data[k]) for k in keys if data.get(k)), "")
    why = next((str(data[k]) for k in ("why", "explanation", "description") if data.get(k)), "")
    score = next((data[k] for k in ("confidence", "score", "likelihood") if k in data), None)
    text = head or str(cause)
    if why and why != head:
        text += f": {why}"
    if isinstance(score, int | float) and not isinstance(score, bool):
        text += f" ({score:.0%})" if 0 <= score <= 1 else f" ({score:g})"
    elif isinstance(score, str) and score:
        text += f" ({score} confidence)"
    return text


def causes_block(causes: Sequence[Any]) -> str:
    """The top cause with what to try, then the others folded."""
    top = _fields_of(causes[0])
    ident = f' <span class="muted">[{escape(str(top["id"]))}]</span>' if top.get("id") else ""
    out = [f'<p class="cause"><b>Top cause:</b> {escape(cause_text(causes[0]))}{ident}</p>']
    remedies = top.get("remedies") or []
    if isinstance(remedies, list | tuple) and remedies:
        items = "".join(f"<li>{escape(str(x))}</li>" for x in remedies)
        out.append(f'<ul class="remedies">{items}</ul>')
    if len(causes) > 1:
        items = "".join(f"<li>{escape(cause_text(c))}</li>" for c in causes[1:])
        out.append(f"<details><summary>{len(causes) - 1} more causes</summary><ul>{items}</ul>")
        out.append("</details>")
    return "".join(out)


def _exit_text(r: Report) -> str:
    return (r.exit.describe() if r.exit else "") or ""


def verdict_block(r: Report) -> str:
    v = r.verdict
    kind = r.kind
    out = [f'<section id="verdict" class="verdict {kind_class(kind)}">']
    out.append(f'<span class="kind">{escape(kind)}</span>')
    if v is not None:
        out.append(f'<span class="summary">{escape(v.summary)}</span>')
        causes = getattr(v, "causes", None)
        if isinstance(causes, list | tuple) and causes:
            out.append(causes_block(causes))
    elif r.status != RunStatus.COMPLETE:
        out.append(
            f'<span class="summary">the run is {escape(r.status)} at stage {escape(r.stage)}</span>'
        )
    rows: list[tuple[str, str]] = []
    if v is not None:
        rows += [
            ("mechanism", e(v.mechanism) if v.mechanism else ""),
            ("location", f"<code>{escape(v.location)}</code>" if v.location else ""),
            ("frames", code(" → ".join(v.location_frames))),
            ("runtime", escape(" ← ".join(v.runtime))),
            ("chain", escape(v.wake_chain)),
        ]
    t = r.timings
    trigger = r.trigger or ""
    if trigger and t.run_s is not None:
        trigger += f" after {t.run_s:.1f} s"
    pin = ""
    if r.pin is not None and r.pin.name:
        status = r.pin.verification_status or "not verified"
        pin = f'{escape(r.pin.name)} (<span class="s-{escape(status)}">{escape(status)}</span>)'
    rows += [
        ("trigger", escape(trigger)),
        ("exit", escape(_exit_text(r))),
        ("pin", pin),
        ("variant", escape(r.variant.spec) if r.variant else ""),
        ("command", f"<code>{escape(' '.join(r.command.argv))}</code>" if r.command else ""),
        ("limits", escape(r.limits.describe()) if r.limits else ""),
    ]
    out.append(facts(rows))
    evidence = v.beside_chain if v is not None else []
    if evidence:
        n = len(evidence)
        items = "".join(f"<li><code>{escape(line)}</code></li>" for line in evidence)
        opened = " open" if n <= 4 else ""
        out.append(f"<details{opened}><summary>evidence ({n} lines)</summary><ul>{items}</ul>")
        out.append("</details>")
    out.append("</section>")
    return "".join(out)


# ---------------------------------------------------------------- the other sections


def checks_section(r: Report) -> str:
    if not r.checks:
        return '<p class="muted">No checks.</p>'
    context = ""
    if r.kind not in (Kind.PASS, Kind.CHECK_FAILED):
        context = '<p class="muted">Context only: the run did not finish.</p>'
    rows = (
        (
            f"<td>{e(c.name)}</td>",
            f'<td class="s-{escape(c.status)}">{e(c.status)}</td>',
            f"<td>{e(c.observed)}</td>",
            f"<td>{e(c.bound)}</td>",
            f"<td>{e(c.message)}</td>",
        )
        for c in r.checks
    )
    failed = sum(c.status == CheckStatus.FAIL for c in r.checks)
    head = f"<p>{len(r.checks) - failed}/{len(r.checks)} passed</p>"
    return head + context + table(("check", "status", "observed", "bound", "message"), rows)


def pin_section(r: Report) -> str:
    if r.pin is None:
        return '<p class="muted">No pin (a watched command).</p>'
    ver = r.pin.verification or {}
    status = str(ver.get("status") or "not verified")
    lineage = " → ".join(r.pin.lineage) if len(r.pin.lineage) > 1 else ""
    rows = [
        ("pin", f"{escape(r.pin.name)} <span class='muted'>{escape(r.pin.file)}</span>"),
        ("extends", escape(lineage)),
        ("status", f'<span class="s-{escape(status)}">{escape(status)}</span>'),
        ("summary", e(ver.get("summary")) if ver.get("summary") else ""),
        ("source", e(ver.get("source")) if ver.get("source") else ""),
    ]
    want, got = ver.get("commit_expected"), ver.get("commit_actual")
    if want or got:
        mark = "s-match" if want == got else "s-mismatch"
        rows.append(("commit", f'<code>{e(want)}</code> → <code class="{mark}">{e(got)}</code>'))
    for key in ("dirty", "unverified", "notes"):
        values = ver.get(key)
        if values:
            rows.append((key, "<br>".join(e(x) for x in values)))
    out = [facts(rows)]
    files = [f for f in ver.get("files") or [] if isinstance(f, Mapping)]
    if files:
        bad = [f for f in files if f.get("status") != FileStatus.MATCH]
        cells = (
            (
                f"<td class='mono'>{e(f.get('path'))}</td>",
                f"<td class='s-{escape(str(f.get('status')))}'>{e(f.get('status'))}</td>",
                f"<td class='h'>{e(f.get('expected'))}</td>",
                f"<td class='h'>{e(f.get('actual'))}</td>",
            )
            for f in files
        )
        what = f"{len(bad)} of {len(files)} files differ" if bad else f"{len(files)} files match"
        opened = " open" if bad else ""
        out.append(
            f"<details{opened}><summary>sha256 of the pinned files: {escape(what)}</summary>"
            + table(("file", "status", "expected sha256", "actual sha256"), cells)
            + "</details>"
        )
    if r.variant is not None and r.variant.changes:
        changes = "".join(f"<li><code>{escape(c)}</code></li>" for c in r.variant.changes)
        out.append(f"<h3>Variant {escape(r.variant.spec)}: changes to the source</h3>")
        out.append(f"<ul>{changes}</ul>")
    return "".join(out)


def build_section(r: Report) -> str:
    b = r.build
    if b is None:
        return '<p class="muted">No build (a watched command).</p>'
    state = "ok" if b.ok else "failed"
    rows = [
        ("result", f'<span class="s-{"pass" if b.ok else "fail"}">{state}</span>'),
        ("cache", "hit" if b.cache_hit else "built"),
        ("duration", escape(f"{b.duration_s:.1f} s")),
        ("key", f"<code>{e(b.key)}</code>"),
        ("command", f"<code>{e(b.command)}</code>"),
        ("tree", f"<code>{e(b.tree)}</code>"),
        ("log", f"<code>{e(b.log_path)}</code>"),
        ("env", escape(", ".join(f"{k}={v}" for k, v in b.env.items()))),
        ("toolchain", "<br>".join(f"{e(k)}: {e(v)}" for k, v in b.toolchain.items())),
        ("first error", f"<code>{e(b.first_error)}</code>" if b.first_error else ""),
        ("hint", e(b.hint) if b.hint else ""),
    ]
    return facts(rows)


def output_section(r: Report) -> str:
    tail = r.progress.output_tail
    p = r.progress
    head = (
        f'<p class="muted">{p.output_lines} output lines, {p.frames} dashboard frames; '
        "the last lines:</p>"
    )
    if not tail:
        return head + '<p class="muted">(no output)</p>'
    return head + "<pre>" + escape("\n".join(tail)) + "</pre>"


def files_section(r: Report, page_dir: Path | None = None) -> str:
    """Links to the report folder's files, relative to where the page is written."""
    names = [REPORT_JSON, *r.files(), *sorted(r.evidence.values())]
    present = [n for n in dict.fromkeys(names) if (r.directory / n).exists()]
    if not present:
        return '<p class="muted">No other files next to this page.</p>'
    base = page_dir if page_dir is not None else r.directory
    items = "".join(
        f'<li><a href="{escape(quote(relative_link(r.directory / n, base)))}">{escape(n)}</a></li>'
        for n in present
    )
    return f'<ul class="files">{items}</ul>'


def relative_link(path: Path, base: Path) -> str:
    """`path` as a link from a page in folder `base` (index pages link each run's page)."""
    try:
        return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()
    except ValueError:  # another drive (Windows): an absolute link
        return path.resolve().as_posix()


def hazards_section(r: Report) -> str:
    """What --hazards recorded (docs/hazards.md): the count line, each hazard's evidence."""
    assert r.hazards is not None
    out = [f"<p>{e(r.hazards.line())}</p>"]
    for h in r.hazards.hazards:
        out.append(f"<h3>{e(h.kind.value)} at {code(h.where)}</h3><p>{e(h.summary)}</p>")
        out.append(facts((label, e(text)) for label, text in h.facts()))
    if r.hazards.notes:
        out.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in r.hazards.notes) + "</ul>")
    return "".join(out)


def render_html(report: Report, page_dir: Path | None = None) -> str:
    """The whole page for one run; its links are relative to `page_dir` (default: the
    report's folder, where report.html belongs)."""
    r = report
    head = (
        f"<h1>harness {escape(r.mode)}: {escape(r.title)} · {escape(r.run_id)} · "
        f"{escape(r.status)} · {escape(r.started_at)}</h1>"
    )
    body = [
        head,
        verdict_block(r),
        section("timeline", "Timeline", render_timeline(r)),
        section("stacks", "Merged stack tree", render_stack_tree(r.samples, r.verdict)),
        section("checks", "Checks", checks_section(r)),
        section("pin", "Pin verification", pin_section(r)),
        section("build", "Build", build_section(r)),
        section("output", "Output tail", output_section(r)),
    ]
    if r.hazards is not None:
        body.insert(2, section("hazards", "Hazards", hazards_section(r)))
    notes = list(r.notes) + (r.samples.notes if r.samples else [])
    if notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in notes)
        body.append(section("notes", "Notes", f"<ul>{items}</ul>"))
    body.append(section("files", "Files", files_section(r, page_dir)))
    return page(f"{r.kind}: harness {r.mode} {r.title}", body)


# ---------------------------------------------------------------- index of several runs


def _href(row: RunRow, index_dir: Path) -> str | None:
    """The row's report.html as a link from the index page (None: the run left no report)."""
    if not row.report_dir:
        return None
    return relative_link(Path(row.report_dir) / REPORT_HTML, index_dir)


def _badge(row: RunRow, href: str | None) -> str:
    text = escape(row.kind) + (f" · {escape(row.location)}" if row.location else "")
    badge = f'<span class="badge {kind_class(row.kind)}">{text}</span>'
    return f'<a href="{escape(quote(href))}">{badge}</a>' if href else badge


def _pivot(rows: Sequence[RunRow], axes: Sequence[str], hrefs: Sequence[str | None]) -> str:
    """variant × the other coordinates (a commit, a cell of knob values), when both have
    more than one value."""
    others = [a for a in axes if a != AxisKind.VARIANT]
    if AxisKind.VARIANT not in axes or not others:
        return ""

    def key(r: RunRow) -> str:
        return ", ".join(str(r.coordinate(a) or "-") for a in others)

    variants = list(dict.fromkeys(r.coordinate("variant") or "-" for r in rows))
    keys = list(dict.fromkeys(key(r) for r in rows))
    if len(variants) < 2 or len(keys) < 2:
        return ""
    cells = {
        (key(r), r.coordinate("variant") or "-"): _badge(r, h)
        for r, h in zip(rows, hrefs, strict=True)
    }
    body = (
        [f"<td class='mono'>{e(k)}</td>"] + [f"<td>{cells.get((k, v), '-')}</td>" for v in variants]
        for k in keys
    )
    return table((", ".join(others), *variants), body, "matrix")


def render_index(
    title: str,
    rows: Sequence[RunRow],
    axes: Sequence[str],
    index_dir: Path,
    conclusion: Sequence[str] = (),
    figure: str = "",
) -> str:
    """index.html of a multi-run command: the conclusion, its figure (SVG escaped by its
    maker), a verdict matrix when variants
    meet another coordinate, and a row per run (its coordinates `axes`, verdict, mechanism,
    top cause, summary) linked to its report.html, relative to `index_dir`."""
    hrefs = [_href(r, index_dir) for r in rows]
    body = [f"<h1>{escape(title)}</h1>"]
    kinds: dict[str, int] = {}
    for row in rows:
        for kind, n in row.kinds.items():
            kinds[kind] = kinds.get(kind, 0) + n
    summary = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no runs"
    runs = sum(r.runs for r in rows)
    body.append(f'<p class="summary">{runs} runs: {escape(summary)}</p>')
    if conclusion:
        body.append("<ul>" + "".join(f"<li>{escape(c)}</li>" for c in conclusion) + "</ul>")
    if figure:
        body.append(f'<figure class="plot">{figure}</figure>')
    body.append(_pivot(rows, axes, hrefs))
    cells = (
        [f"<td class='mono'>{e(r.coordinate(a))}</td>" for a in axes]
        + [
            f"<td>{_badge(r, h)}</td>",
            f"<td>{e(r.mechanism)}</td>",
            f"<td>{e(r.cause)}</td>",
            f"<td>{e(r.summary)}</td>",
            f'<td><a href="{escape(quote(h))}">report</a></td>' if h else "<td>-</td>",
        ]
        for r, h in zip(rows, hrefs, strict=True)
    )
    headers = (*axes, "verdict", "mechanism", "cause", "summary", "report")
    body.append(section("runs", "Runs", table(headers, cells, "runs")))
    return page(title, body)
