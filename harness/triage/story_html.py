"""triage.html: a triage told as one story (docs/triage.md), in the order a reader asks:
what happens → where → why → what does not matter → what fixes it → when it came in → what
to do. Each section comes from its step and says the step's state (a skipped one why); each
claim links the run or table behind it.

The page is report.html's kind (html_page: inline style, no URL of any kind, opens offline
from a CI artifact). Links are relative to the triage folder and made only to regular files
that exist inside it when the page is written (`Evidence`): a run folder that is gone, or a
path in triage.json that points outside the folder, is named as text, never linked."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from harness.filenames import ISSUE_MD, REPEAT_JSON, TRIAGE_JSON
from harness.report.html_page import e, facts, kind_class, page, section, table
from harness.source.blame import HangBlame
from harness.text import html_text as escape
from harness.triage.model import Step, TriageResult
from harness.triage.results import (
    ExplainResult,
    FirstBad,
    FixesResult,
    HistoryResult,
    KnobsResult,
    ReproduceResult,
)
from harness.triage.story_facts import (
    NOT_KNOWN,
    Evidence,
    cause_line,
    host_facts,
    not_investigated,
    rate_text,
    seconds,
    step_of,
    step_state,
)
from harness.vocab import StepStatus, TriageStep

STATUS_CLASS = {
    StepStatus.DONE: "s-pass",
    StepStatus.SKIPPED: "s-skip",
    StepStatus.PENDING: "s-skip",
    StepStatus.FAILED: "s-fail",
}


def _a(ev: Evidence, where: object, label: str, prefer: str = "") -> str:
    """`label` linked to the evidence at `where` (its file `prefer` when there is one);
    plain text when there is none."""
    target = ev.target(where, prefer)
    if target is None:
        return escape(label)
    return f'<a href="{escape(quote(target))}">{escape(label)}</a>'


def _run_list(ev: Evidence, folders: Sequence[object]) -> str:
    """The run folders of a step: each linked to its page, or named as text."""
    items = []
    for folder in folders:
        if not isinstance(folder, str) or not folder:
            continue
        missing = "" if ev.page_of(folder) else ' <span class="muted">(no file)</span>'
        items.append(f"<li>{_a(ev, folder, folder)}{missing}</li>")
    return f'<ul class="files">{"".join(items)}</ul>' if items else ""


def _state(step: Step) -> str:
    cls = STATUS_CLASS.get(step.status, "")
    return (
        f'<p class="step">step <b>{escape(str(step.name))}</b>: '
        f'<span class="{cls}">{escape(step_state(step))}</span></p>'
    )


def _told(step: Step, headline: bool = True) -> tuple[str, bool]:
    """The step's state line and its run folders; False when there is nothing more to tell
    (the step did not run)."""
    head = _state(step)
    if headline and step.headline and step.status is StepStatus.DONE:
        head += f'<p class="summary">{escape(step.headline)}</p>'
    missing = not_investigated(step)
    if missing:
        head += f'<p class="muted">{escape(missing.capitalize())}.</p>'
    return head, missing is None


def _runs_of(step: Step, ev: Evidence) -> str:
    listing = _run_list(ev, step.runs)
    return (
        f"<details><summary>runs behind this step</summary>{listing}</details>" if listing else ""
    )


def _what(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.REPRODUCE)
    out, ran = _told(step)
    if not ran:
        return out
    res = step.found(ReproduceResult)
    kind = str(res.kind) if res.kind is not None else NOT_KNOWN
    out += facts(
        [
            ("verdict", f'<span class="badge {kind_class(kind)}">{escape(kind)}</span>'),
            ("summary", _a(ev, res.folder, res.summary or NOT_KNOWN)),
            ("rate", _a(ev, res.folder, rate_text(res) or NOT_KNOWN, prefer=REPEAT_JSON)),
            ("first failure", _a(ev, res.first_failure, res.first_failure or NOT_KNOWN)),
            ("variant", e(res.variant or "stock")),
            ("host profile", e(res.host or "none (this host as it is)")),
        ]
    )
    if res.tried_hosts:
        rows = (
            [f"<td>{e(t.host or 'this host as it is')}</td>", f"<td>{e(t.summary)}</td>"]
            for t in res.tried_hosts
        )
        out += "<h3>Host profiles tried</h3>" + table(("host", "result"), rows)
    return out + _runs_of(step, ev)


def _where(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.EXPLAIN)
    out, ran = _told(step)
    if not ran:
        return out
    res = step.found(ExplainResult)
    frames = [f for f in res.location_frames if f]
    waits = [w for w in res.waits if w]
    out += facts(
        [
            ("location", _a(ev, res.report, res.location or NOT_KNOWN)),
            ("mechanism", e(res.mechanism or NOT_KNOWN)),
            ("frames", f"<code>{escape(' → '.join(frames))}</code>" if frames else e(NOT_KNOWN)),
        ]
    )
    out += "<h3>Who waits for whom</h3>"
    if waits:
        out += "<ul>" + "".join(f"<li>{_a(ev, res.report, w)}</li>" for w in waits) + "</ul>"
    else:
        out += f'<p class="muted">{e(NOT_KNOWN)}</p>'
    return out


def _why(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.EXPLAIN)
    out, ran = _told(step, headline=False)
    if not ran:
        return out
    res = step.found(ExplainResult)
    causes = res.causes
    if causes:
        top = causes[0]
        out += f'<p class="cause"><b>Top cause:</b> {_a(ev, res.report, cause_line(top))}</p>'
        remedies = [x for x in top.remedies if x]
        if remedies:
            out += '<ul class="remedies">' + "".join(f"<li>{e(x)}</li>" for x in remedies) + "</ul>"
        if len(causes) > 1:
            others = "".join(f"<li>{e(cause_line(c))}</li>" for c in causes[1:])
            more = f"<summary>{len(causes) - 1} more causes</summary>"
            out += f"<details>{more}<ul>{others}</ul></details>"
    else:
        out += f'<p class="muted">No cause named ({e(NOT_KNOWN)}).</p>'
    if res.doctor:
        rows = (
            [
                f"<td>{e(d.name)}</td>",
                f'<td class="s-{escape(str(d.status))}">{e(d.status)}</td>',
                f"<td>{e(d.detail)}</td>",
            ]
            for d in res.doctor
        )
        out += "<h3>Platform facts that bear on it</h3>" + table(
            ("probe", "status", "detail"), rows
        )
    if res.blame is not None:
        out += "<h3>Blame</h3>" + facts(_blame_pairs(res.blame))
    return out + _runs_of(step, ev)


def _blame_pairs(blame: HangBlame) -> list[tuple[str, str]]:
    where, line, pragma = blame.where, blame.commit, blame.construct
    return [
        ("line", f"<code>{escape(where)}</code>" if where else e(NOT_KNOWN)),
        ("its commit", e(f"{line.short} {line.subject}".rstrip() if line else NOT_KNOWN)),
        (
            "the construct's commit",
            e(f"{pragma.short} {pragma.subject}".rstrip() if pragma else NOT_KNOWN),
        ),
    ]


def _not_matter(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.KNOBS)
    out, ran = _told(step)
    if not ran:
        return out
    res = step.found(KnobsResult)
    rows = (
        [
            f"<td><code>{escape(k.label or '?')}</code></td>",
            f"<td>{e(', '.join(v for v in k.values if v))}</td>",
            f"<td>{e(k.effect)}</td>",
            f"<td>{_a(ev, res.folder, k.line or NOT_KNOWN)}</td>",
        ]
        for k in res.knobs
    )
    out += table(("knob", "values", "effect", "what the runs say"), rows) if res.knobs else ""
    if res.conclusion:
        out += f"<p>{_a(ev, res.folder, res.conclusion)}</p>"
    return out + _runs_of(step, ev)


def _fixes(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.FIXES)
    out, ran = _told(step)
    if not ran:
        return out
    res = step.found(FixesResult)
    decision = str(res.decision) if res.decision is not None else NOT_KNOWN
    passed = (res.fix_text or res.fix_variant) if res.fix_variant else ""
    out += facts(
        [
            ("fix", _a(ev, res.folder, passed or f"none confirmed ({decision})")),
            ("summary", _a(ev, res.folder, res.summary)) if res.summary else ("", ""),
        ]
    )
    if res.variants:
        rows = (
            [
                f"<td><code>{escape(v.variant or '?')}</code></td>",
                f"<td>{e(v.runs)}</td>",
                f"<td>{_a(ev, res.folder, v.summary or NOT_KNOWN)}</td>",
            ]
            for v in res.variants
        )
        out += table(("variant", "runs", "result"), rows)
    changes = [x for x in res.changes if x]
    if changes:
        out += "<h3>Its changes to the source</h3><pre>" + escape("\n".join(changes)) + "</pre>"
    return out + _runs_of(step, ev)


def _when(r: TriageResult, ev: Evidence) -> str:
    step = step_of(r, TriageStep.HISTORY)
    out, ran = _told(step)
    if not ran:
        return out
    res = step.found(HistoryResult)
    first = res.first_bad or FirstBad()
    head = " ".join(x for x in (first.sha, first.subject) if x)
    good = " ".join(x for x in (res.good, res.good_how) if x)
    out += facts(
        [
            ("first bad", _a(ev, res.folder, head or f"not found ({res.status or NOT_KNOWN})")),
            ("author", e(first.author)) if first.author else ("", ""),
            ("date", e(first.date)) if first.date else ("", ""),
            ("last good", e(good or NOT_KNOWN)),
            (
                "confidence",
                e(str(res.confidence) if res.confidence is not None else NOT_KNOWN),
            ),
            ("possible", e(", ".join(x for x in res.possible if x))) if res.possible else ("", ""),
        ]
    )
    if first.diffstat:
        out += f"<pre>{escape(first.diffstat)}</pre>"
    if res.searched:
        rows = (
            [f"<td><code>{e(s.sha)}</code></td>", f"<td>{e(s.classification)}</td>"]
            for s in res.searched
        )
        out += (
            "<details><summary>commits tested</summary>"
            + table(("commit", "result"), rows)
            + "</details>"
        )
    return out + _runs_of(step, ev)


def _todo(r: TriageResult, ev: Evidence) -> str:
    out = ""
    if r.conclusion:
        out += "<ul>" + "".join(f"<li>{e(c)}</li>" for c in r.conclusion) + "</ul>"
    if r.commands:
        out += "<h3>Reproduce and confirm</h3><pre>" + escape("\n".join(r.commands)) + "</pre>"
    files = [_a(ev, n, n) for n in (ISSUE_MD, TRIAGE_JSON) if ev.file(n)]
    if files:
        out += "<p>The bug report: " + " · ".join(files) + "</p>"
    return out or f'<p class="muted">{e(NOT_KNOWN)}</p>'


def _steps_table(r: TriageResult) -> str:
    rows = (
        [
            f"<td>{e(str(s.name))}</td>",
            f'<td class="{STATUS_CLASS.get(s.status, "")}">{e(str(s.status))}</td>',
            f"<td>{e(s.reason or s.headline)}</td>",
            f"<td>{e(seconds(s.estimate_s))}</td>",
            f"<td>{e(seconds(s.duration_s))}</td>",
            f"<td>{s.runs_made} runs, {s.builds_made} builds</td>",
        ]
        for s in r.steps
    )
    return table(("step", "status", "headline or reason", "estimated", "took", "made"), rows)


STORY = (
    ("what", "What happens", _what),
    ("where", "Where", _where),
    ("why", "Why", _why),
    ("not-matter", "What does not matter", _not_matter),
    ("fixes", "What fixes it", _fixes),
    ("when", "When it came in", _when),
    ("todo", "What to do", _todo),
)


def render_story(result: TriageResult) -> str:
    """triage.html of a triage, from its steps and the files in its folder."""
    r = result
    ev = Evidence(r.directory)
    rep = step_of(r, TriageStep.REPRODUCE)
    found = rep.found(ReproduceResult).kind
    kind = str(found or "pass") if r.reproduced else "pass"
    headline = rep.headline or ("reproduced" if r.reproduced else "not reproduced here")
    verdict = (
        f'<section id="verdict" class="verdict {kind_class(kind)}">'
        f'<span class="kind">{escape(kind if r.reproduced else "not reproduced")}</span>'
        f'<span class="summary">{escape(headline)}</span>'
        + facts(
            [
                ("fix confirmed", e(r.fix_confirmed or "none")),
                ("first bad commit", e(r.first_bad or "none found")),
                ("budget", escape(f"{seconds(r.spent_s)} spent of {seconds(r.budget_s)}")),
                ("pin", e(r.pin or NOT_KNOWN)),
                ("host", e("; ".join(f"{k}: {v}" for k, v in host_facts(r.host)[:5]))),
            ]
        )
        + "</section>"
    )
    title = f"harness triage {r.env}"
    body = [
        f"<h1>{escape(title)} · {escape(r.pin or '')} · {escape(r.started_at)}</h1>",
        verdict,
        section("steps", "Steps, time and budget", _steps_table(r)),
    ]
    body += [section(ident, heading, tell(r, ev)) for ident, heading, tell in STORY]
    return page(f"triage: {r.env}", body)
