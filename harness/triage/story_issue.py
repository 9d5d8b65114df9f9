"""issue.md: a triage told as the bug report people file upstream (docs/triage.md):
Environment, Symptom, Reproduction, Blame, Knobs, Fix, from what the steps recorded
(story_facts reads it: a missing value is "not known", never guessed).

Every string from a run goes through `markdown_text`/`markdown_code`, so no line of it can
open a heading, a link, HTML or a code fence in the report. A section whose step did not run
is one line saying why: nothing appears in issue.md that the runs did not show."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from harness.text import markdown_code, markdown_text, strip_controls
from harness.triage.model import TriageResult
from harness.triage.story_facts import (
    NOT_KNOWN,
    cause_line,
    commit_of,
    entries,
    host_facts,
    not_investigated,
    pick,
    rate_text,
    scalars,
    seconds,
    step_of,
    strings,
    word,
)
from harness.vocab import StepStatus, TriageStep


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
    res, ex = rep.result, exp.result if exp.status is StepStatus.DONE else {}
    kind = word(ex, "kind") or word(res, "kind")
    location = word(ex, "location") or word(res, "location")
    if rep.status is StepStatus.DONE:
        verdict = t(kind or NOT_KNOWN) + (f" in {c(location)}" if location else "")
        out += _bullets(
            [
                ("verdict", verdict),
                ("summary", t(word(res, "summary") or NOT_KNOWN)),
                ("rate", t(rate_text(res) or NOT_KNOWN)),
                ("variant", c(word(res, "variant") or "stock")),
                (
                    "host profile",
                    c(word(res, "host")) if word(res, "host") else "none (this host as it is)",
                ),
            ]
        )
        for tried in entries(res, "tried_hosts"):
            host = tried.get("host")  # null: this host as it is
            where = f"under {c(host)}" if host else "on this host as it is"
            out.append(f"  - {where}: {t(tried.get('summary') or NOT_KNOWN)}")
    if exp.status is not StepStatus.DONE:
        out += ["", f"What the threads do: {t(not_investigated(exp) or '')}."]
        return out
    frames = strings(pick(ex, "location_frames"))
    causes = entries(ex, "causes")
    out += ["", "What the threads do:", ""]
    out += _bullets(
        [
            ("mechanism", t(word(ex, "mechanism") or NOT_KNOWN)),
            ("frames", c(" → ".join(frames)) if frames else t(NOT_KNOWN)),
            ("cause", t(cause_line(causes[0])) if causes else t(NOT_KNOWN)),
        ]
    )
    waits = strings(pick(ex, "waits"))
    out.append("- **who waits for whom**:" + ("" if waits else f" {t(NOT_KNOWN)}"))
    out += [f"  - {p(w)}" for w in waits]
    for cause in causes[1:]:
        out.append(f"- other cause: {t(cause_line(cause))}")
    doctor = entries(ex, "doctor")
    if doctor:
        out.append("- **doctor**:")
        out += [
            f"  - {p(d.get('name') or '?')}: {t(d.get('status') or '?')}"
            + (f" — {t(d['detail'])}" if isinstance(d.get("detail"), str) and d["detail"] else "")
            for d in doctor
        ]
    return out


def _reproduction(r: TriageResult) -> list[str]:
    out = ["## Reproduction", ""]
    if not r.commands:
        return [*out, p("not known: the triage recorded no command")]
    return [*out, *_fenced(r.commands, "sh")]


def _blame(r: TriageResult) -> list[str]:
    exp, hist = step_of(r, TriageStep.EXPLAIN), step_of(r, TriageStep.HISTORY)
    out = ["## Blame", ""]
    blame = pick(exp.result, "blame") if exp.status is StepStatus.DONE else None
    if exp.status is not StepStatus.DONE:
        out.append(f"- **the located line**: {t(not_investigated(exp) or '')}")
    elif isinstance(blame, Mapping) and blame:
        where = word(blame, "file") or NOT_KNOWN
        if word(blame, "line"):
            where += f":{word(blame, 'line')}"
        line = f"- **the located line** {c(where)}: "
        commit = word(blame, "commit")
        line += (
            f"{c(commit)} {t(word(blame, 'subject') or '')}".rstrip() if commit else t(NOT_KNOWN)
        )
        out.append(line)
        pragma = word(blame, "pragma_commit")
        subject = word(blame, "pragma_subject")
        out.append(
            "- **the commit that brought its construct in**: "
            + (f"{c(pragma)} {t(subject or '')}".rstrip() if pragma else t(NOT_KNOWN))
        )
    else:
        out.append(f"- **the located line**: {t('not known: no blame (not a git source?)')}")
    out.append("")
    missing = not_investigated(hist)
    res = hist.result
    first = pick(res, "first_bad")
    if missing:
        out.append(f"First bad commit: {t(missing)}.")
    elif isinstance(first, Mapping) and word(first, "sha"):
        out.append(
            f"First bad commit: {c(word(first, 'sha'))} {t(word(first, 'subject') or '')}".rstrip()
        )
        out.append("")
        out += _bullets(
            [
                ("author", t(word(first, "author") or NOT_KNOWN)),
                ("date", t(word(first, "date") or NOT_KNOWN)),
                (
                    "last good",
                    c(word(res, "good"))
                    + (f" ({t(word(res, 'good_how'))})" if word(res, "good_how") else "")
                    if word(res, "good")
                    else t(NOT_KNOWN),
                ),
                ("confidence", t(word(res, "confidence") or NOT_KNOWN)),
            ]
        )
        diffstat = pick(first, "diffstat")
        stat = diffstat.splitlines() if isinstance(diffstat, str) else strings(diffstat)
        if stat:
            out += ["", *_fenced(stat)]
    else:
        possible = scalars(pick(res, "possible"), key="sha")
        out.append(f"First bad commit: not found ({t(word(res, 'status') or NOT_KNOWN)}).")
        if possible:
            out.append("Possible: " + ", ".join(c(sha) for sha in possible))
    return out


def _knobs(r: TriageResult) -> list[str]:
    step = step_of(r, TriageStep.KNOBS)
    out = ["## Knobs", ""]
    missing = not_investigated(step)
    if missing:
        return [*out, p(missing)]
    knobs = entries(step.result, "knobs")
    groups = (
        ("ruled-out", "Ruled out (the outcome does not change)"),
        ("changes", "Change the outcome"),
        ("unsettled", "Unsettled (more runs needed)"),
        ("not-judged", "Not judged"),
    )
    for effect, title in groups:
        mine = [k for k in knobs if k.get("effect") == effect]
        if not mine:
            continue
        out += [f"{title}:", ""]
        for k in mine:
            values = scalars(k.get("values"))
            what = c(k.get("label") or "?") + (f" ({t(', '.join(values))})" if values else "")
            line = k.get("line")
            out.append(f"- {what}" + (f": {t(line)}" if isinstance(line, str) and line else ""))
        out.append("")
    if not knobs:
        out += [p("no knob was swept"), ""]
    if word(step.result, "conclusion"):
        out.append("Conclusion: " + t(word(step.result, "conclusion")))
    return out


def _fix(r: TriageResult) -> list[str]:
    step = step_of(r, TriageStep.FIXES)
    out = ["## Fix", ""]
    missing = not_investigated(step)
    if missing:
        return [*out, p(missing)]
    res = step.result
    variant = word(res, "fix_variant") or (
        r.fix_confirmed if isinstance(r.fix_confirmed, str) else None
    )
    confirmed = pick(res, "confirmed")
    if variant and confirmed is not False:
        out.append(f"Fix: {t(word(res, 'fix_text') or variant)}.")
    else:
        out.append(f"No fix confirmed ({t(word(res, 'decision') or NOT_KNOWN)}).")
    if word(res, "summary"):
        out += ["", p(word(res, "summary"))]
    variants = entries(res, "variants")
    if variants:
        out += ["", "| variant | runs | result |", "|---|---|---|"]
        for v in variants:
            runs = word(v, "runs") or "?"
            out.append(
                f"| {c(v.get('variant') or '?')} | {t(runs)} | {t(v.get('summary') or NOT_KNOWN)} |"
            )
    changes = strings(pick(res, "changes"))
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
