"""issue.md: a triage told as the bug report people file upstream (docs/triage.md):
Environment, Symptom, Reproduction, Blame, Knobs, Fix, from what the steps recorded
(story_facts reads it: a missing value is "not known", never guessed).

Every string from a run goes through `markdown_text`/`markdown_code`, so no line of it can
open a heading, a link, HTML or a code fence in the report. A section whose step did not run
is one line saying why: nothing appears in issue.md that the runs did not show."""

from __future__ import annotations

import re
from collections.abc import Sequence

from harness.source.blame import LineCommit
from harness.text import markdown_code, markdown_text, strip_controls
from harness.triage.model import TriageResult
from harness.triage.results import (
    ExplainResult,
    FixesResult,
    HistoryResult,
    KnobsResult,
    ReproduceResult,
)
from harness.triage.story_facts import (
    NOT_KNOWN,
    cause_line,
    commit_of,
    host_facts,
    not_investigated,
    rate_text,
    seconds,
    step_of,
)
from harness.vocab import KnobEffect, StepStatus, TriageStep


def t(value: object) -> str:
    """Run text as Markdown inside a line."""
    return markdown_text(str(value), paragraph=False)


def p(value: object) -> str:
    """Run text as Markdown that starts a paragraph or a list item, where a leading `#`,
    `>`, `-` or `1.` would open a block."""
    return markdown_text(str(value), paragraph=True)


def c(value: object) -> str:
    return markdown_code(str(value)) or t(NOT_KNOWN)


def _bullets(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [f"- **{label}**: {value}" for label, value in pairs if value]


def _fenced(lines: Sequence[str], lang: str = "") -> list[str]:
    """A code block holding `lines` (controls stripped): its fence is longer than any run
    of backticks inside, so no line of it closes the block."""
    body = [strip_controls(x) for x in lines]
    longest = max((len(r) for x in body for r in re.findall(r"`+", x)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", *body, fence]


def _environment(r: TriageResult) -> list[str]:
    out = ["## Environment", ""]
    out += _bullets([(k, t(v)) for k, v in host_facts(r.host)])
    out.append(f"- **pin**: {c(r.pin) if r.pin else t(NOT_KNOWN)}")
    commit = commit_of(r)
    out.append(f"- **commit**: {c(commit) if commit else t(NOT_KNOWN)}")
    return out


def _symptom(r: TriageResult) -> list[str]:
    rep, exp = step_of(r, TriageStep.REPRODUCE), step_of(r, TriageStep.EXPLAIN)
    out = ["## Symptom", ""]
    missing = not_investigated(rep)
    if missing:
        out.append(f"Reproduction {t(missing)}.")
    res = rep.found(ReproduceResult)
    ex = exp.found(ExplainResult) if exp.status is StepStatus.DONE else ExplainResult()
    kind = ex.kind or res.kind
    location = ex.location or res.location
    if rep.status is StepStatus.DONE:
        verdict = t(kind or NOT_KNOWN) + (f" in {c(location)}" if location else "")
        out += _bullets(
            [
                ("verdict", verdict),
                ("summary", t(res.summary or NOT_KNOWN)),
                ("rate", t(rate_text(res) or NOT_KNOWN)),
                ("variant", c(res.variant or "stock")),
                ("host profile", c(res.host) if res.host else "none (this host as it is)"),
            ]
        )
        for tried in res.tried_hosts:
            # no host: this host as it is
            where = f"under {c(tried.host)}" if tried.host else "on this host as it is"
            out.append(f"  - {where}: {t(tried.summary or NOT_KNOWN)}")
    if exp.status is not StepStatus.DONE:
        out += ["", f"What the threads do: {t(not_investigated(exp) or '')}."]
        return out
    frames = [f for f in ex.location_frames if f]
    causes = ex.causes
    out += ["", "What the threads do:", ""]
    out += _bullets(
        [
            ("mechanism", t(ex.mechanism or NOT_KNOWN)),
            ("frames", c(" → ".join(frames)) if frames else t(NOT_KNOWN)),
            ("cause", t(cause_line(causes[0])) if causes else t(NOT_KNOWN)),
        ]
    )
    waits = [w for w in ex.waits if w]
    out.append("- **who waits for whom**:" + ("" if waits else f" {t(NOT_KNOWN)}"))
    out += [f"  - {p(w)}" for w in waits]
    for cause in causes[1:]:
        out.append(f"- other cause: {t(cause_line(cause))}")
    if ex.doctor:
        out.append("- **doctor**:")
        out += [
            f"  - {p(d.name or '?')}: {t(d.status)}" + (f" — {t(d.detail)}" if d.detail else "")
            for d in ex.doctor
        ]
    return out


def _reproduction(r: TriageResult) -> list[str]:
    out = ["## Reproduction", ""]
    if not r.commands:
        return [*out, p("not known: the triage recorded no command")]
    return [*out, *_fenced(r.commands, "sh")]


def _commit(commit: LineCommit | None) -> str:
    """A commit of a blame: its short sha and subject, or "not known"."""
    if commit is None:
        return t(NOT_KNOWN)
    return f"{c(commit.short)} {t(commit.subject)}".rstrip()


def _blame(r: TriageResult) -> list[str]:
    exp, hist = step_of(r, TriageStep.EXPLAIN), step_of(r, TriageStep.HISTORY)
    out = ["## Blame", ""]
    blame = exp.found(ExplainResult).blame if exp.status is StepStatus.DONE else None
    if exp.status is not StepStatus.DONE:
        out.append(f"- **the located line**: {t(not_investigated(exp) or '')}")
    elif blame is not None:
        where = blame.where or NOT_KNOWN
        out.append(f"- **the located line** {c(where)}: {_commit(blame.commit)}")
        out.append(f"- **the commit that brought its construct in**: {_commit(blame.construct)}")
    else:  # the run says why it did not blame ("no history to blame: a path source")
        why = exp.found(ExplainResult).blame_skipped or "no blame (not a git source?)"
        out.append(f"- **the located line**: {t(f'not known: {why}')}")
    out.append("")
    missing = not_investigated(hist)
    res = hist.found(HistoryResult)
    first = res.first_bad
    if missing:
        out.append(f"First bad commit: {t(missing)}.")
    elif first is not None and first.sha:
        out.append(f"First bad commit: {c(first.sha)} {t(first.subject)}".rstrip())
        out.append("")
        out += _bullets(
            [
                ("author", t(first.author or NOT_KNOWN)),
                ("date", t(first.date or NOT_KNOWN)),
                (
                    "last good",
                    c(res.good) + (f" ({t(res.good_how)})" if res.good_how else "")
                    if res.good
                    else t(NOT_KNOWN),
                ),
                (
                    "confidence",
                    t(res.confidence if res.confidence is not None else NOT_KNOWN),
                ),
            ]
        )
        stat = first.diffstat.splitlines()
        if stat:
            out += ["", *_fenced(stat)]
    else:
        possible = [x for x in res.possible if x]
        out.append(f"First bad commit: not found ({t(res.status or NOT_KNOWN)}).")
        if possible:
            out.append("Possible: " + ", ".join(c(sha) for sha in possible))
    return out


def _knobs(r: TriageResult) -> list[str]:
    step = step_of(r, TriageStep.KNOBS)
    out = ["## Knobs", ""]
    missing = not_investigated(step)
    if missing:
        return [*out, p(missing)]
    res = step.found(KnobsResult)
    groups = (
        (KnobEffect.RULED_OUT, "Ruled out (the outcome does not change)"),
        (KnobEffect.CHANGES, "Change the outcome"),
        (KnobEffect.UNSETTLED, "Unsettled (more runs needed)"),
        (KnobEffect.NOT_JUDGED, "Not judged"),
    )
    for effect, title in groups:
        mine = [k for k in res.knobs if k.effect is effect]
        if not mine:
            continue
        out += [f"{title}:", ""]
        for k in mine:
            values = [v for v in k.values if v]
            what = c(k.label or "?") + (f" ({t(', '.join(values))})" if values else "")
            out.append(f"- {what}" + (f": {t(k.line)}" if k.line else ""))
        out.append("")
    if not res.knobs:
        out += [p("no knob was swept"), ""]
    if res.conclusion:
        out.append("Conclusion: " + t(res.conclusion))
    return out


def _fix(r: TriageResult) -> list[str]:
    step = step_of(r, TriageStep.FIXES)
    out = ["## Fix", ""]
    missing = not_investigated(step)
    if missing:
        return [*out, p(missing)]
    res = step.found(FixesResult)
    variant = res.fix_variant or r.fix_confirmed
    if variant:
        out.append(f"Fix: {t(res.fix_text or variant)}.")
    else:
        out.append(f"No fix confirmed ({t(res.decision or NOT_KNOWN)}).")
    if res.summary:
        out += ["", p(res.summary)]
    if res.variants:
        out += ["", "| variant | runs | result |", "|---|---|---|"]
        for v in res.variants:
            runs = str(v.runs) if v.runs is not None else "?"
            out.append(f"| {c(v.variant or '?')} | {t(runs)} | {t(v.summary or NOT_KNOWN)} |")
    changes = [x for x in res.changes if x]
    if changes:
        out += ["", f"Changes of {c(variant or 'the fix')}:", "", *_fenced(changes)]
    return out


def render_issue(result: TriageResult) -> str:
    """issue.md of a triage, from its steps alone."""
    r = result
    rep = step_of(r, TriageStep.REPRODUCE)
    title = rep.headline if rep.status is StepStatus.DONE and rep.headline else "triage"
    out = [f"# {t(r.env)}: {t(title)}", ""]
    if r.conclusion:
        out += [f"> {t(line)}" for line in r.conclusion]
        out.append("")
    for part in (_environment, _symptom, _reproduction, _blame, _knobs, _fix):
        out += [*part(r), ""]
    out += [
        "---",
        f"Found with `harness triage` in {seconds(r.spent_s)} of a {seconds(r.budget_s)} "
        "budget; each step's runs are in the triage folder (triage.json, triage.html).",
    ]
    return "\n".join(out) + "\n"
