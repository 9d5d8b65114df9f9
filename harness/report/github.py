"""GitHub Actions, when the harness runs under it (GITHUB_ACTIONS=true): the summary and the
verdict table appended to the job's step summary ($GITHUB_STEP_SUMMARY), an `::error`
annotation at the located source line of a hang (so the pull request shows it on the line),
and `::warning` annotations for failed checks. Outside Actions nothing here writes anything.

GitHub renders the step summary as Markdown with HTML: every value in it goes through
`report.markdown` (`harness.text.markdown_text`: whatever Markdown would read as markup,
raw HTML and entities included, backslash-escaped; CommonMark's escapes, which GitHub's
renderer honours). An annotation's message has its controls removed and CR/LF escaped, so it
stays one line: nothing the trainer printed can start a workflow command of its own on our
stdout (the trainer's output itself never reaches our stdout: it goes to output.log, and
with --tee to stderr).

Workflow command syntax: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from harness import outcome
from harness.analysis.classify import located_frame, path_in_tree
from harness.outcome import Kind
from harness.report import markdown
from harness.report.model import Report
from harness.text import terminal_safe
from harness.vocab import CheckStatus, SourceKind


def active(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("GITHUB_ACTIONS") == "true"


def _data(text: str) -> str:
    """A workflow command's message: %, CR and LF are escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    """A workflow command's property value: also ':' and ','."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, message: str, **props: object) -> str:
    """`::kind key=value,…::message`, escaped."""
    shown = ",".join(f"{k}={_prop(str(v))}" for k, v in props.items() if v is not None)
    return f"::{kind} {shown}::{_data(message)}" if shown else f"::{kind}::{_data(message)}"


def _source_root(r: Report, environ: Mapping[str, str]) -> Path | None:
    """Where the run's source lives in the workspace: the pin's folder for a path source,
    the checkout for a git source (HARNESS_CHECKOUT), else unknown."""
    if r.pin is None:
        return None
    if r.pin.source.get("kind") == SourceKind.PATH and r.pin.file:
        return (Path(r.pin.file).parent / str(r.pin.source.get("path", ""))).resolve()
    checkout = environ.get("HARNESS_CHECKOUT")
    return Path(checkout).resolve() if checkout else None


def located_line(r: Report, environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The file (relative to the workspace) and line of the located frame of a hang."""
    env = os.environ if environ is None else environ
    v = r.verdict
    if v is None or not v.location or r.samples is None:
        return None
    found = located_frame(v, r.samples)
    if found is None:
        return None
    frame = found[1]
    assert frame.file is not None and frame.line is not None
    path = Path(frame.file)
    rel = path_in_tree(frame.file, r.build.tree) if r.build is not None else None
    if rel is not None:
        root = _source_root(r, env)
        path = root / rel if root is not None else rel
    workspace = Path(env.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    if path.is_absolute() and path.is_relative_to(workspace):
        path = path.relative_to(workspace)
    return str(path), frame.line


def workflow_commands(r: Report, environ: Mapping[str, str] | None = None) -> list[str]:
    """The workflow commands for a finished run: an error at the hang's line (or without a
    line for other failures), a warning per failed check."""
    v = r.verdict
    out: list[str] = []
    if v is not None and outcome.is_failure(v.kind) and v.kind != Kind.CHECK_FAILED:
        title = terminal_safe(f"harness {r.mode} {r.title}: {v.kind}")
        summary = terminal_safe(v.summary)
        where = located_line(r, environ)
        if where is not None:
            out.append(command("error", summary, file=where[0], line=where[1], title=title))
        else:
            out.append(command("error", summary, title=title))
    for h in r.hazards.hazards if r.hazards is not None else []:
        title = terminal_safe(f"harness {r.mode} {r.title}: hazard {h.kind.value}")
        out.append(command("warning", terminal_safe(h.line()), title=title))
    for c in r.checks:
        if c.status == CheckStatus.FAIL:
            message = terminal_safe(f"{c.name}: observed {c.observed}, bound {c.bound}")
            title = terminal_safe(f"harness check {r.title}")
            out.append(command("warning", message, title=title))
    return out


def summary_markdown(r: Report) -> str:
    v = r.verdict
    kind = r.kind
    lines = [f"### harness {r.mode}: {markdown.md(r.title)} → **{markdown.md(kind)}**", ""]
    if v is not None:
        lines += [markdown.md(v.summary, paragraph=True), ""]
    rows: list[tuple[str, object]] = [("verdict", kind)]
    if v is not None:
        rows += [("mechanism", v.mechanism), ("location", v.location)]
        if v.location_frames:
            rows.append(("frames", " → ".join(v.location_frames[-6:])))
    if r.pin is not None:
        rows.append(("pin", f"{r.pin.name} ({r.pin.verification_status or '-'})"))
    if r.variant is not None:
        rows.append(("variant", r.variant.spec))
    if r.checks:
        failed = sum(c.status == CheckStatus.FAIL for c in r.checks)
        rows.append(("checks", f"{len(r.checks) - failed}/{len(r.checks)} passed"))
    if r.hazards is not None:  # a pass too: the hazard is in every run (docs/hazards.md)
        rows.append(("hazards", r.hazards.line()))
        rows += [("", h.line()) for h in r.hazards.hazards[1:4]]
    rows.append(("report", str(r.directory)))
    lines += markdown.table(("", ""), rows)
    failed_checks = [c for c in r.checks if c.status == CheckStatus.FAIL]
    if failed_checks:
        lines += ["", "Failed checks:", ""]
        lines += markdown.table(
            ("check", "observed", "bound"), ((c.name, c.observed, c.bound) for c in failed_checks)
        )
    return "\n".join(lines) + "\n\n"


def append_summary(text: str, environ: Mapping[str, str] | None = None) -> bool:
    """Append to $GITHUB_STEP_SUMMARY; False when there is none (or it cannot be written)."""
    env = os.environ if environ is None else environ
    path = env.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError:
        return False
    return True


def publish(r: Report, stream: TextIO, environ: Mapping[str, str] | None = None) -> None:
    """Under GitHub Actions: the step summary and the annotations of one run."""
    if not active(environ):
        return
    append_summary(summary_markdown(r), environ)
    for line in workflow_commands(r, environ):
        print(line, file=stream, flush=True)


def publish_table(
    title: str,
    table: Sequence[str],
    conclusion: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Under GitHub Actions: a multi-run command's verdict table (markdown lines, from
    report.matrix) and its conclusion in the step summary; False when nothing was written."""
    if not active(environ):
        return False
    told = [markdown.md(c, paragraph=True) for c in conclusion]
    said = [f"- {c}" for c in told] if len(told) > 1 else told
    lines = [f"### {markdown.md(title)}", "", *said, "", *table]
    return append_summary("\n".join(lines) + "\n\n", environ)
