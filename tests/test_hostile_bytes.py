"""Hostile bytes from the trainer (issue 17): a real program prints a clear-screen, a window
title, an OSC 8 hyperlink, NUL, VT, a lone ESC, a C1 CSI, a bidi override, a <script>, a table
row, a code fence, a GitHub workflow command and invalid UTF-8, and fails. Every reader gets
text it can trust: the terminal summary has no controls, junit.xml is well-formed and reads
back, report.md and the step summary hold no raw HTML, report.html escapes it, and the
workflow command never starts a line of our stdout. Then `harness.text` itself, by example
and by property."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import JUnitXml
from rich.console import Console

from harness.report import github, matrix
from harness.report.runs import row_from_error
from harness.text import (
    html_text,
    markdown_code,
    markdown_text,
    strip_controls,
    terminal_safe,
    xml_safe,
)
from harness.vocab import RunMode, TableKind
from tests.harness_cli import harness
from tests.mdrender import read

# what a terminal, a reader or GitHub would act on
CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

# The program: the hostile lines are the last ones, so the verdict quotes each (the output
# tail) and its first error line carries them into the summary, annotation and step summary.
HOSTILE = r"""
import sys
out = sys.stdout.buffer
out.write(
    "\x1b[2J\x1b[H\x1b]0;pwned\x07see \x1b]8;;https://evil.example/\x1b\\this link\x1b]8;;\x1b\\"
    " nul\x00 vt\x0b lone\x1b c1\x9b31m bidi \u202egnp.exe\u202c end\n".encode()
)
out.write(b"::error::injected\n")
out.write(b"<script>alert(1)</script> | a | b |  ``` bad utf-8 \xff\xfe\xc3( end\n")
out.write(
    "RuntimeError: boom \x1b[2J\x1b]0;pwned\x07<script>alert(1)</script> | a | b | ``` "
    "\x00\x9b \u202eevil\n".encode()
)
out.flush()
sys.exit(3)
"""


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path, Path]:
    """One `harness watch` of the program, as under GitHub Actions: (stdout, stderr, the
    report folder, the step summary)."""
    tmp = tmp_path_factory.mktemp("hostile")
    program = tmp / "hostile.py"
    program.write_text(HOSTILE)
    summary = tmp / "step-summary.md"
    summary.write_text("")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "200"}
    root = tmp / "reports"
    res = harness("watch", "--", sys.executable, str(program), report_root=root, env=env)
    assert res.code == 3, res.stdout + res.stderr  # error-exit, the trainer's own failure
    return res.stdout, res.stderr, res.folder, summary


def _quoted(folder: Path) -> list[str]:
    import json

    data = json.loads((folder / "report.json").read_text())
    evidence: list[str] = data["verdict"]["evidence"]
    return evidence


@pytest.mark.timeout(120)
def test_the_verdict_quotes_the_hostile_bytes(hostile_run: tuple[str, str, Path, Path]) -> None:
    """The premise: report.json keeps the trainer's bytes as they were (JSON escapes them),
    so each renderer below really is given them."""
    evidence = "\n".join(_quoted(hostile_run[2]))
    for raw in ("\x1b[2J", "\x1b]0;pwned\x07", "\x1b]8;;", "\x00", "\x0b", "\u202e", "\x9b"):
        assert raw in evidence, repr(raw)
    for text in ("<script>alert(1)</script>", "| a | b |", "::error::injected", "\ufffd"):
        assert text in evidence, text


@pytest.mark.timeout(120)
def test_terminal_summary_has_no_controls(hostile_run: tuple[str, str, Path, Path]) -> None:
    stdout, stderr, _, _ = hostile_run
    assert "RuntimeError: boom" in stdout and "bidi gnp.exe end" in stdout, stdout
    assert "see this link" in stdout  # a hyperlink's text stays, its target does not
    for out in (stdout, stderr):
        assert not CONTROLS.search(out.replace("\n", "")), repr(CONTROLS.findall(out))
        assert not BIDI.search(out) and "pwned" not in out and "evil.example" not in out


@pytest.mark.timeout(120)
def test_no_workflow_command_reaches_stdout(hostile_run: tuple[str, str, Path, Path]) -> None:
    stdout = hostile_run[0]
    lines = stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("::error ")], stdout  # ours: one annotation
    assert not [ln for ln in lines if ln.startswith("::error::injected")], stdout
    annotation = next(ln for ln in lines if ln.startswith("::error "))
    assert not CONTROLS.search(annotation) and not BIDI.search(annotation), repr(annotation)


@pytest.mark.timeout(120)
def test_junit_is_well_formed_and_reads_back(hostile_run: tuple[str, str, Path, Path]) -> None:
    folder = hostile_run[2]
    path = folder / "junit.xml"
    root = ET.parse(path).getroot()  # well-formed
    [system_out] = root.iter("system-out")
    assert system_out.text == xml_safe("\n".join(_quoted(folder)))  # every allowed char kept
    cases = next(iter(JUnitXml.fromfile(str(path))))
    [case] = [c for c in cases if c.name == "verdict[command]"]
    assert case.system_out == system_out.text
    [failure] = case.result
    assert "<script>alert(1)</script>" in (failure.message or "")


@pytest.mark.timeout(120)
def test_report_md_is_plain_text(hostile_run: tuple[str, str, Path, Path]) -> None:
    md = (hostile_run[2] / "report.md").read_text()
    assert "\x1b" not in md and "\x00" not in md, md
    assert not CONTROLS.search(md.replace("\n", "")) and not BIDI.search(md)
    assert "\\<script>alert(1)\\</script>" in md  # escaped for Markdown, readable raw
    tags, text = read(md)
    assert "script" not in tags and "<script>alert(1)</script>" in text  # rendered: text
    assert "\\| a \\| b \\|" in md  # the table row is text, each pipe escaped
    assert not [ln for ln in md.splitlines() if ln.startswith("```")], md  # no fence opened


@pytest.mark.timeout(120)
def test_step_summary_has_no_raw_html(hostile_run: tuple[str, str, Path, Path]) -> None:
    text = hostile_run[3].read_text()
    assert "RuntimeError: boom" in text, text
    assert "\x1b" not in text and not BIDI.search(text), text
    tags, shown = read(text)
    assert "script" not in tags and "<script>alert(1)</script>" in shown, text


@pytest.mark.timeout(120)
def test_report_html_escapes_it(hostile_run: tuple[str, str, Path, Path]) -> None:
    page = (hostile_run[2] / "report.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    assert "\x1b" not in page and "\x00" not in page and not BIDI.search(page)


@pytest.mark.timeout(120)
def test_harness_report_shows_it_safely(
    hostile_run: tuple[str, str, Path, Path], tmp_path: Path
) -> None:
    """`harness report` renders the saved report again: the same cleaned text."""
    folder = hostile_run[2]
    res = harness("report", str(folder), "--out", str(tmp_path), report_root=tmp_path)
    assert res.code == 0, res.stderr
    assert "RuntimeError: boom" in res.stdout
    assert not CONTROLS.search(res.stdout.replace("\n", "")) and not BIDI.search(res.stdout)
    assert "<script>alert" not in (tmp_path / "report.html").read_text()


# ---------------------------------------------------------------- multi-run tables

HOSTILE_TEXT = "\x1b]0;pwned\x07<img src=x onerror=alert(1)> | x | ```\n# h \u202eevil\x00"


def test_matrix_tables_escape_run_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    row = row_from_error(HOSTILE_TEXT, 5, {"variant": "x<b>"}, "x<b>")
    m = matrix.Matrix(
        TableKind.COMPARE, "harness compare <b>t</b>", ["variant"], [row], [HOSTILE_TEXT]
    )
    out = tmp_path / "compare"
    matrix.write_matrix(m, out)
    for text in ((out / "compare.md").read_text(), summary.read_text()):
        assert "\x1b" not in text and not BIDI.search(text) and "\x00" not in text, text
        tags, shown = read(text)  # rendered: the markup is text, no element
        assert not {"img", "b"} & set(tags), text
        assert "<img src=x onerror=alert(1)>" in shown and "x<b>" in shown, shown
        rows = [ln for ln in text.splitlines() if ln.startswith("| x")]
        assert len(rows) == 1, text
        cells = re.split(r"(?<!\\)\|", rows[0])[1:-1]  # the escaped pipes add no column
        assert len(cells) == len(m.table_columns()), cells
    assert "<img" not in (out / "index.html").read_text()
    console_out = tmp_path / "terminal.txt"
    with console_out.open("w") as fh:
        matrix.print_matrix(m, out, as_json=False, stream=fh)
    shown = console_out.read_text()
    assert "img src=x" in shown and "&lt;" not in shown  # the terminal shows the text itself
    assert not CONTROLS.search(shown.replace("\n", "")) and not BIDI.search(shown)


def test_summary_markdown_and_annotations_escape(tmp_path: Path) -> None:
    from harness.analysis.classify import Verdict
    from harness.outcome import Kind
    from harness.report.model import Report

    r = Report("id", tmp_path, [], RunMode.WATCH)
    r.verdict = Verdict(Kind.ERROR_EXIT, summary="boom\n::error::again <b>x</b> \x1b[2J")
    text = github.summary_markdown(r)
    assert "\x1b" not in text and "\\<b>x\\</b>" in text
    tags, shown = read(text)
    assert "b" not in tags and "<b>x</b>" in shown
    [line] = github.workflow_commands(r, {})
    assert line.count("\n") == 0 and "::error::again" in line and "\x1b" not in line
    assert line.startswith("::error title=")


# ---------------------------------------------------------------- harness.text


def test_terminal_safe_examples() -> None:
    assert terminal_safe("\x1b[2J\x1b[Hclear") == "clear"
    assert terminal_safe("a\x1b]0;pwned\x07b\x1b]2;t\x1b\\c") == "abc"
    link = "\x1b]8;;https://e.example/\x1b\\text\x1b]8;;\x1b\\"
    assert terminal_safe(link) == "text"
    assert terminal_safe("\x1bP1;2|data\x1b\\x\x1b_apc\x9c\x9dosc\x07y") == "xy"
    assert terminal_safe("a\x1b(Bb\x1bcc\x1b7d\x1b") == "abcd"
    assert terminal_safe("\x9b31mred\x9b0m") == "red"
    assert terminal_safe("tab\tkept\x00\x7f\x85nel") == "tab\tkept nel"
    assert terminal_safe("line\r\nnext\x0bvt") == "line next vt"
    assert terminal_safe("\u202egnp.exe\u202c \u2066iso\u2069") == "gnp.exe iso"
    assert terminal_safe("\x1b]0;never terminated") == ""  # a terminal would swallow it too
    assert terminal_safe("plain → ✓ 日本") == "plain → ✓ 日本"


def test_xml_safe_examples() -> None:
    assert xml_safe("a\x00b\x1b[2Jc\x0bd\tx\ny\rz") == "ab[2Jcd\tx\ny\rz"
    assert xml_safe("\ufffe\uffff\ud800ok\U0001f600") == "ok\U0001f600"


def test_markdown_examples() -> None:
    assert markdown_text("<script>x</script>") == "\\<script>x\\</script>"
    assert (
        markdown_text("<!-- x --> <?p?> <http://e> <a/>")
        == "\\<!-- x --> \\<?p?> \\<http://e> \\<a/>"
    )
    # what Markdown does not read as markup stays as written: the raw file reads as well
    said = "child hung > 3.0s; libgomp.so.1 => /lib/x; a < b, 1 <2, a && b, x -> y"
    assert markdown_text(said) == said
    assert (
        markdown_text("> quote") == "\\> quote" and markdown_text("> q", paragraph=False) == "> q"
    )
    assert markdown_text("___") == "\\___" and markdown_text("__init__") == "__init__"
    assert markdown_text("a | b") == "a \\| b"
    assert markdown_text("[t](http://e) ![i](x)") == "\\[t\\](http://e) !\\[i\\](x)"
    assert markdown_text("# h") == "\\# h" and markdown_text("# h", paragraph=False) == "# h"
    assert markdown_text("1. x") == "1\\. x" and markdown_text("- x") == "\\- x"
    assert markdown_text("```\nfence") == "\\`\\`\\` fence"
    assert markdown_text("back\\| slash") == "back\\\\\\| slash"  # no escape is undone
    assert markdown_text("&#x202e; &lt; &#8238;") == "\\&#x202e; \\&lt; \\&#8238;"
    assert markdown_text("env_start") == "env_start"
    assert markdown_code("a `b` c") == "``a `b` c``"
    assert markdown_code("`x`") == "`` `x` ``" and markdown_code("a|b") == "`a\\|b`"


def test_html_text_keeps_lines() -> None:
    assert html_text("<a>\n\x1b[31mb\u202e") == "&lt;a&gt;\nb"
    assert strip_controls("a\r\nb\rc", keep_newlines=True) == "a\nb\nc"


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_terminal_safe_leaves_no_control(s: str) -> None:
    out = terminal_safe(s)
    assert not CONTROLS.search(out) and not BIDI.search(out), repr(out)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF)))
def test_xml_safe_is_accepted_inside_an_element(s: str) -> None:
    out = xml_safe(s)
    element = ET.Element("system-out")
    element.text = out
    element.set("message", out)
    parsed = ET.fromstring(ET.tostring(element, encoding="unicode"))
    assert not XML_FORBIDDEN.search(out)
    # the parser normalizes line ends (CR LF and CR to LF) in text, and all of them in
    # attributes: the rest reads back as written
    assert (parsed.text or "").replace("\n", "") == out.replace("\r", "").replace("\n", "")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_markdown_text_is_one_inert_line(s: str) -> None:
    out = markdown_text(s)
    assert "\n" not in out and not CONTROLS.search(out) and not BIDI.search(out)
    # rendered, it is one paragraph of the text itself: no tag, comment, entity, link,
    # heading, list, quote or break came of it (`_` emphasis aside, left alone by choice)
    tags, text = read(out)
    flat = " ".join(strip_controls(s).split())
    assert set(tags) <= {"p", "em", "strong"} and tags[:1] == (["p"] if flat else []), out
    assert text.removesuffix("\n").replace("_", "") == flat.replace("_", ""), out
    # every pipe, bracket and backtick is escaped (preceded by an odd run of backslashes)
    for m in re.finditer(r"(\\*)([|\[\]`])", out):
        assert len(m[1]) % 2 == 1, out


def test_console_of_rich_does_not_strip_by_itself() -> None:
    """Why `terminal_safe` exists: rich prints ESC and OSC through unchanged."""
    import io

    buf = io.StringIO()
    Console(file=buf, highlight=False).print("\x1b]0;pwned\x07\x1b[2J", markup=False)
    assert "\x1b" in buf.getvalue()


@pytest.mark.timeout(120)
def test_tee_under_actions_keeps_workflow_commands_inert(tmp_path: Path) -> None:
    """`--tee` echoes the trainer's bytes to stderr, which the Actions runner also reads for
    workflow commands: the echo is wrapped in ::stop-commands:: with an unguessable token,
    so the trainer's `::error::injected` stays text; the token is resumed after it."""
    program = tmp_path / "hostile.py"
    program.write_text(HOSTILE)
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "s.md")}
    res = harness(
        "watch", "--tee", "--", sys.executable, str(program), report_root=tmp_path, env=env
    )
    assert res.code == 3, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    injected = lines.index("::error::injected")  # the echo itself is raw (--tee's promise)
    stops = [i for i, ln in enumerate(lines) if ln.startswith("::stop-commands::")]
    assert len(stops) == 1 and stops[0] < injected, res.stderr
    token = lines[stops[0]].removeprefix("::stop-commands::")
    assert re.fullmatch(r"[0-9a-f]{32}", token), token
    assert f"::{token}::" in lines[injected + 1 :], res.stderr
