"""The pieces every page of report.html and index.html shares: the inline style sheet and
script (no URL of any kind), the page shell, sections, tables, fact lists, escaped values
and the colour of a verdict kind (from the outcome registry's style)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from harness import outcome
from harness.text import html_text as escape

COLORS = {"green": "#2b8a3e", "red": "#c92a2a", "yellow": "#b07800", "magenta": "#9c36b5"}

CSS = """
:root{--fg:#1d2125;--muted:#6a737d;--line:#d8dee4;--bg2:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
margin:0 auto;max-width:1120px;padding:16px 20px 40px}
h1{font-size:15px;font-weight:600;margin:0 0 10px;color:var(--muted)}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:14px;margin:12px 0 6px}
code,pre,.mono{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--bg2);border:1px solid var(--line);padding:8px 10px;overflow:auto;
max-height:420px;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:4px 0}
th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
th{background:var(--bg2);font-weight:600}
td.h{font:11.5px ui-monospace,monospace;word-break:break-all}
.muted{color:var(--muted)}
.verdict{border-left:8px solid var(--k);background:var(--bg2);padding:12px 16px;
border-radius:4px}
.kind{display:inline-block;font-size:22px;font-weight:700;color:var(--k);
text-transform:uppercase;letter-spacing:.03em;margin-right:10px}
.summary{font-size:17px;font-weight:600}
.cause{margin:8px 0 0;font-size:15px}
ul.remedies{margin:2px 0 0;font-size:13px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0 0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.badge{display:inline-block;white-space:nowrap;padding:0 7px;border-radius:9px;color:#fff;
background:var(--k);font-weight:600;font-size:12.5px}
.k-green{--k:#2b8a3e}.k-red{--k:#c92a2a}.k-yellow{--k:#b07800}.k-magenta{--k:#9c36b5}
.k-plain{--k:#57606a}
.s-pass,.s-match,.s-verified{color:#2b8a3e;font-weight:600}
.s-fail,.s-mismatch,.s-missing,.s-drift{color:#c92a2a;font-weight:600}
.s-skip,.s-unverified{color:#b07800;font-weight:600}
svg.timeline{width:100%;height:auto;display:block;font:11px system-ui,sans-serif}
svg .lbl{fill:#57606a;font-weight:600}svg .tl{fill:#57606a;font-size:10px}
svg .tn{fill:#24292f;font:10.5px ui-monospace,monospace}svg .pn{font-weight:700;fill:#24292f}
svg .wl{fill:#24292f;font-size:10px}svg .trg{fill:#c92a2a;font-weight:700}
svg .muted-t{fill:#6a737d;font-style:italic}
svg .axis,svg .tick{stroke:#8c959f}
.win-startup{fill:#a5d8ff;background:#a5d8ff}.win-stall{fill:#ffd8a8;background:#ffd8a8}
.win-quiet{fill:#ffc9c9;background:#ffc9c9}.quiet{fill:#868e96;background:#868e96}
svg .life{fill:#adb5bd}
.sampling{fill:#d0bfff;background:#d0bfff}.dump{fill:#7048e8;background:#7048e8}
svg .dump-mark{fill:#7048e8}
svg .trigger{stroke:#c92a2a;stroke-width:2}.trigger-sw{background:#c92a2a}
svg .end{stroke:#24292f;stroke-dasharray:3 2}svg .wall{stroke:#9c36b5;stroke-dasharray:5 3}
svg .progress-tick{stroke:#2b8a3e;stroke-width:1.5}
svg .snap{stroke:#57606a;stroke-dasharray:1 2}
svg .zoom{fill:#eef1f4}
svg .lane-bg{fill:#fbfcfd}svg .lane-bg.odd{fill:#f3f5f7}
.st-R{fill:#69db7c;background:#69db7c}.st-S{fill:#a5b4c8;background:#a5b4c8}
.st-D{fill:#ffa94d;background:#ffa94d}.st-T,.st-t{fill:#b197fc;background:#b197fc}
.st-Z,.st-X{fill:#495057;background:#495057}.st-I{fill:#dee2e6;background:#dee2e6}
.st-q{fill:#f1f3f5}
.cpu{fill:#2b8a3e;background:#2b8a3e}svg .cpu{opacity:.8}
svg .birth{fill:#2b8a3e}svg .death{fill:#212529}
.legend{font-size:12px;color:var(--muted)}
.sw{display:inline-block;width:11px;height:11px;vertical-align:-1px;margin:0 3px 0 8px;
border:1px solid #0002}
.tree{font:12.5px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.tree details.blk{margin:0}
.tree summary{cursor:pointer}
.tree .kids{margin-left:1.1em;padding-left:.6em;border-left:1px dashed #c4ccd4}
.tree .fr{white-space:nowrap;margin-left:1.05em}
.tree summary .fr{margin-left:0}
.tree .n{display:inline-block;min-width:2.2em;text-align:right;color:#fff;background:#57606a;
border-radius:3px;padding:0 4px;margin-right:4px;font-size:11px}
.tree .fr.own .fn{font-weight:700}
.tree .at{color:var(--muted)}
.tree .inl{font-size:10.5px;color:#9c36b5;border:1px solid #d0bfff;border-radius:3px;padding:0 3px}
.tree .located{background:#ffe3e3;outline:1px solid #c92a2a;border-radius:2px}
.tree .located .n{background:#c92a2a}
.tree .mark{color:#c92a2a;font-weight:700}
.tree details.who{margin-left:1.05em;color:var(--muted);font-size:11.5px}
.tree details.who ul{margin:2px 0 4px;padding-left:2.2em}
button{font:12px system-ui,sans-serif;padding:1px 8px}
ul.files{columns:2;padding-left:18px}
"""

JS = """
document.addEventListener('click',function(e){
  var b=e.target.closest&&e.target.closest('[data-expand]');if(!b)return;
  var open=b.getAttribute('data-expand')==='1';
  document.querySelectorAll('#stacks details.blk').forEach(function(d){d.open=open;});
});
"""


def e(value: object) -> str:
    """Escaped text: None as '-', floats short."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return escape(f"{value:.4g}")
    return escape(str(value))


def code(text: str) -> str:
    return f"<code>{escape(text)}</code>" if text else ""


def kind_class(kind: str) -> str:
    color = outcome.style(kind).split()[-1]
    return f"k-{color}" if color in COLORS else "k-plain"


def page(title: str, body: Iterable[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + f"<script>{JS}</script></body></html>\n"
    )


def section(ident: str, title: str, body: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{body}</section>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in pairs if v)
    return f'<dl class="facts">{items}</dl>' if items else ""
