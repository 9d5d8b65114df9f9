"""A bisect for people: report.md (the answer, the parent and the first bad commit side by
side, every step, with repeated runs the confidence) and the one-screen terminal summary."""

from __future__ import annotations

from dataclasses import replace
from html import escape as escape_html
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harness.bisect.model import BisectOptions, BisectResult, StepRecord
from harness.bisect.steps import COMMIT, expected, shown
from harness.report.markdown import md, table
from harness.report.matrix import Column, Matrix, axis
from harness.report.runs import RunRow
from harness.text import strip_controls, terminal_safe
from harness.vocab import BisectClass, BisectStatus, TableKind

# a step's coordinates in the steps table and index.html
STEP, ROLE, SUBJECT, CLASS, COUNTS = "#", "role", "subject", "class", "runs (bad/good/skip)"
MISS = "miss chance"  # with repeated runs: a good step's chance of passing a bad commit


def repeat_text(opts: BisectOptions) -> str:
    if opts.adaptive:
        return f"posterior search to {opts.confidence:.0%}"
    return f"auto (cap {opts.repeat_cap})" if opts.auto else str(opts.repeat)


def _percent(x: float) -> str:
    """A probability for people: never "100%" for something short of certain."""
    text = f"{100 * x:.1f}%"
    if text == "100.0%" and x < 1:
        return ">99.9%"
    return "<0.1%" if text == "0.0%" and x > 0 else text


def confidence_text(result: BisectResult) -> str | None:
    """The answer's confidence and what it rests on (docs/bisect.md, "Repeated runs"); None
    with one run per commit (the search then assumes a bad commit fails every time)."""
    if result.posterior is not None:
        return posterior_text(result)
    rate, conf = result.bad_rate, result.confidence
    if result.setup.opts.repeat in (1, None) or rate is None or conf is None:
        return None
    good = result.good_steps
    clean = sorted({s.counts()[BisectClass.GOOD] for s in good})
    runs = "-".join(str(n) for n in (clean[:1] + clean[-1:] if len(clean) > 1 else clean))
    text = (
        f"{_percent(conf)} that no step called good was bad after all (bad end: failure "
        f"{rate.text()}; {len(good)} good steps of {runs or 0} clean runs)"
    )
    if not result.setup.opts.auto:
        text += "; with --repeat N the bad end stops at its first failure, so its rate is a "
        text += "rough one: --repeat auto measures it"
    unsettled = [s.commit.short for s in good if s.settled is False]
    if unsettled:
        text += f"; unsettled at the cap, taken as good: {', '.join(unsettled)}"
    return text


def posterior_text(result: BisectResult) -> str:
    """The posterior search's answer in one line: how likely, the range holding the
    confidence, the failure rates on either side, what was sought, why it stopped."""
    p = result.posterior
    assert p is not None
    span = p.range[0] if len(p.range) == 1 else f"{p.range[0]}..{p.range[-1]} ({len(p.range)})"
    return (
        f"{_percent(p.probability)} that {p.likeliest} is the first bad commit; "
        f"{p.confidence:.0%} lies in {span}; failure sought before it {p.before.rate.text()}, "
        f"from it on {p.after.rate.text()}; sought: {p.signature}; stopped: {p.stopped}"
    )


def _miss_text(step: StepRecord) -> str:
    return "-" if step.miss is None else _percent(step.miss)


def _build_text(r: RunRow) -> str:
    if r.build_key is None:
        return "-"
    state = "cache hit" if r.cache_hit else f"built in {r.build_s or 0:.1f}s"
    return state if r.build_ok is not False else f"FAILED ({state})"


def side_by_side(result: BisectResult) -> list[tuple[str, str, str]]:
    """(field, parent's passing run, first bad commit's run) rows."""
    assert result.first_bad is not None and result.parent is not None
    p, b = result.parent.decisive, result.first_bad.decisive
    pc, bc = result.parent.commit, result.first_bad.commit

    def metrics(r: RunRow) -> str:
        return f"epoch {r.epochs if r.epochs is not None else '-'}, SPS {r.sps or '-'}"

    return [
        ("commit", f"{pc.short} {pc.subject}", f"{bc.short} {bc.subject}"),
        ("verdict", p.kind, b.kind),
        ("summary", p.summary, b.summary),
        ("mechanism", p.mechanism or "-", b.mechanism or "-"),
        ("location", p.location or "-", b.location or "-"),
        ("frames", " → ".join(p.location_frames) or "-", " → ".join(b.location_frames) or "-"),
        ("progress", metrics(p), metrics(b)),
        (
            "run",
            f"{p.run_s or 0:.1f}s, exit {p.exit_code}",
            f"{b.run_s or 0:.1f}s, exit {b.exit_code}",
        ),
        ("build", _build_text(p), _build_text(b)),
        ("runs (bad/good/skip)", _counts_text(result.parent), _counts_text(result.first_bad)),
        ("report", p.report_dir or "-", b.report_dir or "-"),
    ]


def _counts_text(step: StepRecord) -> str:
    c = step.counts()
    return f"{c['runs']} ({c[BisectClass.BAD]}/{c[BisectClass.GOOD]}/{c[BisectClass.SKIP]})"


def _md_result(result: BisectResult) -> list[str]:
    opts = result.setup.opts
    lines = [f"**{result.message()}**", "", f"- expected: {expected(opts)}"]
    if (confidence := confidence_text(result)) is not None:
        lines.append(f"- confidence: {md(confidence)}")
    if result.first_bad is not None:
        c = result.first_bad.commit
        lines += [f"- author: {md(f'{c.author}, {c.date}')}"]
        if result.location_matched is not None:
            lines.append(f"- --location {opts.location} matched: {result.location_matched}")
        if result.confirm is not None:
            verdict = "passes" if result.fix_confirmed else "does not pass"
            lines.append(
                f"- fix `{result.confirm.variant}` on {c.short}: {verdict} "
                f"({shown(result.confirm)})"
            )
        if result.parent is not None:
            sides = side_by_side(result)
            lines += ["", *table(("", "parent (last good)", "first bad"), sides)]
        lines += ["", "## Evidence (first bad)", ""]
        lines += [f"- {md(e, True)}" for e in result.first_bad.decisive.evidence]
        # no backtick in a diff stat line can close the fence early
        diffstat = strip_controls(result.diffstat, keep_newlines=True).replace("`", "'")
        lines += ["", "## Diff stat", "", "```", diffstat, "```"]
    return lines


def render_markdown(result: BisectResult) -> str:
    opts, totals = result.setup.opts, result.totals()
    lines = [
        f"# harness bisect: {opts.run.env} ({result.setup.pin.name})",
        "",
        f"{result.good.short}..{result.bad.short}: {len(result.candidates)} commits on the "
        f"first-parent line, variant {opts.run.variant}, repeat {repeat_text(opts)}; "
        f"status {result.status}",
        "",
        *_md_result(result),
        "",
        "## Steps",
        "",
    ]
    lines += steps_matrix(result).table()
    lines += ["", "## Totals", ""] + [f"- {k}: {v}" for k, v in totals.items()]
    return "\n".join(lines) + "\n"


def print_summary(result: BisectResult, stream: TextIO | None = None) -> None:
    """One screen: the answer, the side-by-side runs, the step count, the report folder."""
    console = Console(file=stream, highlight=False, soft_wrap=False)
    totals = result.totals()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    styles = {BisectStatus.FOUND: "bold green", BisectStatus.RANGE: "bold yellow"}
    style = styles.get(result.status, "bold red")
    grid.add_row("result", f"[{style}]{escape(result.message())}[/]")
    grid.add_row("expected", expected(result.setup.opts))
    if (confidence := confidence_text(result)) is not None:
        grid.add_row("confidence", escape(confidence))
    if result.first_bad is not None:
        c = result.first_bad.commit
        grid.add_row("author", escape(terminal_safe(f"{c.author}, {c.date}")))
        if result.location_matched is not None:
            grid.add_row("location", f"matched: {result.location_matched}")
        if result.confirm is not None:
            ok = "[green]passes[/]" if result.fix_confirmed else "[red]does not pass[/]"
            grid.add_row("fix", f"{escape(result.confirm.variant)}: {ok}")
    bound = "" if result.setup.opts.adaptive else f" (bound {totals['step_bound']})"
    grid.add_row(
        "cost",
        f"{totals['steps']} steps{bound}, {totals['runs']} runs, "
        f"{totals['builds']} builds, {totals['cache_hits']} cache hits, {totals['skips']} skips",
    )
    grid.add_row("report", escape(str(result.directory)))
    console.print(
        Panel(grid, title=escape(f"harness bisect: {result.setup.opts.run.env}"), expand=False)
    )
    if result.first_bad is not None and result.parent is not None:
        table = Table("", "parent (last good)", "first bad", expand=False)
        for key, a, b in side_by_side(result):
            if key != "report":
                table.add_row(escape(key), escape(terminal_safe(a)), escape(terminal_safe(b)))
        console.print(table)
        console.print(strip_controls(result.diffstat, keep_newlines=True), markup=False)


def steps_matrix(result: BisectResult) -> Matrix:
    """The steps as a multi-run table (report.md's steps, index.html, the step summary): a
    row per tested commit, its decisive run, labelled by step, role, commit and class."""
    repeated = result.setup.opts.repeat not in (1, None)
    rows = [
        replace(
            s.decisive,
            values={
                STEP: str(n),
                ROLE: s.role,
                COMMIT: s.commit.short,
                SUBJECT: s.commit.subject,
                CLASS: s.classification,
                COUNTS: _counts_text(s),
                **({MISS: _miss_text(s)} if repeated else {}),
            },
        )
        for n, s in enumerate(result.steps, 1)
    ]
    columns = [
        *map(axis, (STEP, ROLE, COMMIT, SUBJECT)),
        Column("verdict", lambda r: r.kind),
        Column("location", lambda r: r.location),
        *map(axis, (CLASS, COUNTS)),
        *([axis(MISS)] if repeated else []),
        Column("build", _build_text),
        Column("run", lambda r: f"{r.run_s or 0:.1f}s"),
    ]
    return Matrix(
        mode=TableKind.BISECT,
        title=f"harness bisect {result.setup.opts.run.env}",
        axes=[STEP, ROLE, COMMIT, SUBJECT, CLASS],
        rows=rows,
        conclusion=[result.message()],
        env=result.setup.opts.run.env,
        columns=columns,
        figure=posterior_svg(result),
    )


def posterior_svg(result: BisectResult) -> str:
    """The posterior per hypothesis as a bar chart for index.html, oldest left: "before"
    (the good end bad too), each candidate, "none" (the bad end not bad). The likeliest bar
    is red, the rest of the range that holds the confidence orange. "" without a posterior."""
    p = result.posterior
    if p is None or not p.per_commit:
        return ""
    n = len(p.per_commit)
    width, height, pad = max(360, min(1200, 14 * n + 60)), 140, 30
    bar = (width - 2 * pad) / n
    top = max(q for _, q in p.per_commit) or 1.0
    caption = (
        f"P(first bad commit), oldest left: {p.likeliest} {_percent(p.probability)}; "
        f"{p.confidence:.0%} in {len(p.range)} commit(s)"
    )
    said, tall = escape_html(caption), height + 2 * pad
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {tall}" '
        f'width="{width}" height="{tall}" role="img" aria-label="{said}">',
        f"<title>{escape_html(caption)}</title>",
        f'<text x="{pad}" y="16" font-size="12">{escape_html(caption)}</text>',
    ]
    for i, (label, q) in enumerate(p.per_commit):
        h = height * q / top
        colour = "#c0392b" if label == p.likeliest else "#e67e22" if label in p.range else "#95a5a6"
        x, y, w = pad + i * bar, pad + height - h, max(1.0, bar - 1)
        tip = f"{escape_html(label)}: {_percent(q)}"
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{colour}">'
            f"<title>{tip}</title></rect>"
        )
    base = pad + height
    out.append(f'<line x1="{pad}" y1="{base}" x2="{width - pad}" y2="{base}" stroke="#333"/>')
    for i, (label, _) in enumerate(p.per_commit):
        if i in (0, n - 1) or label == p.likeliest:
            x = pad + (i + 0.5) * bar
            out.append(
                f'<text x="{x:.1f}" y="{base + 16}" font-size="10" text-anchor="middle">'
                f"{escape_html(label)}</text>"
            )
    out.append("</svg>")
    return "".join(out)
