"""report.html and `harness report`: a saved report back as the typed model (load_report), the
page rendered from it, and the page opened in a real browser (headless Chromium from the
distribution, driven by Playwright, network off): no errors, one timeline lane per sampled
thread, the trigger marked, the merged stack tree naming env_start with its thread count, a
screenshot that is not blank. The same for the index page of several runs."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli import report as report_cli
from harness.cli.options import Parser
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.report.html import render_html, render_index
from harness.report.load import load_report, report_from_json
from harness.report.runs import RunRow, row_from_report
from tests import facts
from tests.harness_cli import ROOT, harness, verdict_of

# ---------------------------------------------------------------- helpers


def minimal_old_report() -> dict[str, Any]:
    """A report.json as an early harness wrote it: few top-level keys, one unknown, and
    samples with only the keys every schema-1 harness wrote (tests/data/reports/ holds real
    ones; a nested key that is missing is damage, not age: tests/test_bounded_reads.py)."""
    return {
        "schema_version": 1,
        "run_id": "20250101-000000-breakout-old0",
        "mode": "run",
        "status": "complete",
        "env": "breakout",
        "pin": {"name": "replica", "verification": {"status": "verified", "files": []}},
        "limits": {"wall_s": 60, "startup_s": 15, "stall_s": 20},
        "trigger": "startup",
        "timings": {"run_s": 17.0, "sampling_s": 2.0},
        "verdict": {"kind": "hang", "summary": "hang <in> env_start", "location": "env_start"},
        "samples": {
            "snapshots": [
                {
                    "t": 0.0,
                    "processes": [
                        {
                            "pid": 10,
                            "ppid": 1,
                            "name": "puffer",
                            "exe": "/w/puffer",
                            "cmdline": ["puffer", "train"],
                            "status": "sleeping",
                            "is_python": False,
                            "threads": [
                                {
                                    "tid": 10,
                                    "name": "puffer",
                                    "state": "S",
                                    "wchan": "",
                                    "syscall": "",
                                    "cpu_time": 0.0,
                                }
                            ],
                        }
                    ],
                }
            ],
            "activity": [],
            "stacks": [
                {
                    "pid": 10,
                    "tid": 10,
                    "name": "puffer",
                    "source": "gdb",
                    "frames": [{"function": "futex_wait"}, {"function": "env_start", "own": True}],
                }
            ],
            "tools": {"native": "gdb"},
            "notes": [],
            "duration_s": 2.0,
        },
        "a_key_from_the_future": {"x": 1},
    }


def with_watch_timeline(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with what the watch loop adds to samples: a timeline over the run, process
    births and exits, each thread's wait (t since launch)."""
    samples = data["samples"]
    threads = [
        (p["pid"], t["tid"])
        for s in samples["snapshots"]
        for p in s["processes"]
        for t in p["threads"]
    ]
    samples["timeline"] = [
        {
            "t": t,
            "quiet": t >= 10,
            "threads": [
                [pid, tid, "R" if t < 5 else "S", t / 2, "", "futex"] for pid, tid in threads
            ],
        }
        for t in (0.5, 2.0, 5.0, 10.0, 12.0, 14.0)
    ]
    samples["events"] = [
        {"t": 0.1, "event": "start", "pid": 10, "ppid": 1, "name": "puffer"},
        {"t": 1.0, "event": "start", "pid": 11, "ppid": 10, "name": "<child>"},
        {"t": 3.0, "event": "exit", "pid": 11, "ppid": 10, "name": "<child>", "status": "exited 0"},
    ]
    samples["waits"] = [
        {"pid": p, "tid": t, "kind": "tree", "what": "futex wait, no timeout"} for p, t in threads
    ]
    samples["watch"] = {
        "interval_s": 0.25,
        "snapshots": 60,
        "quiescence": "on (x86_64)",
        "cpu_s": 0.1,
    }
    return data


def sampled_threads(samples: dict[str, Any]) -> set[tuple[int, int]]:
    """Every (pid, tid) samples.json names: in a snapshot or a stack."""
    seen = {
        (p["pid"], t["tid"])
        for s in samples.get("snapshots", [])
        for p in s["processes"]
        for t in p["threads"]
    }
    return seen | {(st["pid"], st["tid"]) for st in samples.get("stacks", [])}


def without_artifacts(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "artifacts"}


def report_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    """`harness report ARGS` as a subprocess; through the command module directly while the
    command is not yet registered in harness.cli."""
    from harness.cli import COMMANDS

    if "report" in COMMANDS:
        argv = [sys.executable, "-m", "harness", "report", *args]
    else:
        script = (
            "import sys\n"
            "from harness.cli import report\n"
            "from harness.cli.options import Parser\n"
            "from harness.errors import HarnessError\n"
            "p = Parser(prog='harness')\n"
            "report.add_parser(p.add_subparsers(dest='command', parser_class=Parser))\n"
            "args = p.parse_args(['report', *sys.argv[1:]])\n"
            "try:\n"
            "    sys.exit(report.command(args))\n"
            "except HarnessError as exc:\n"
            "    print(f'harness: error: {exc.message}', file=sys.stderr)\n"
            "    sys.exit(exc.exit_code)\n"
        )
        argv = [sys.executable, "-c", script, *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def run_in_process(*args: str) -> tuple[int, str]:
    parser = Parser(prog="harness")
    report_cli.add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
    ns: argparse.Namespace = parser.parse_args(["report", *args])
    out = io.StringIO()
    old, sys.stdout = sys.stdout, out
    try:
        code = report_cli.command(ns)
    finally:
        sys.stdout = old
    return code, out.getvalue()


# ---------------------------------------------------------------- load_report, fast


def test_minimal_old_report_loads_with_defaults(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps(minimal_old_report()))
    r = load_report(tmp_path)
    assert r.directory == tmp_path and r.env == "breakout" and r.harness_argv == []
    assert r.verdict is not None and r.verdict.kind == "hang" and r.verdict.mechanism is None
    assert r.verdict.location_frames == [] and r.checks == [] and r.build is None
    assert r.limits is not None and r.limits.startup_s == 15
    assert getattr(r.limits, "quiescent_s", 0.0) == 0.0  # older runs had no quiescence window
    assert r.samples is not None
    th = r.samples.snapshots[0].processes[0].threads[0]
    assert (th.tid, th.state, th.cpu_time, th.wchan) == (10, "S", 0.0, "")
    frame = r.samples.stacks[0].frames[1]
    assert (frame.function, frame.own, frame.line) == ("env_start", True, None)
    # the reloaded report writes the same again (to_json → load → to_json)
    again = tmp_path / "again"
    again.mkdir()
    (again / "report.json").write_text(json.dumps(r.to_json()))
    assert without_artifacts(load_report(again).to_json()) == without_artifacts(r.to_json())


def test_a_typed_report_round_trips(tmp_path: Path) -> None:
    data = with_watch_timeline(minimal_old_report())
    first = report_from_json(data, tmp_path).to_json()
    (tmp_path / "report.json").write_text(json.dumps(first))
    second = load_report(tmp_path / "report.json").to_json()
    assert json.loads(json.dumps(second)) == json.loads(json.dumps(first))
    samples = load_report(tmp_path).samples
    assert samples is not None and len(samples.timeline) == 6 and len(samples.events) == 3
    assert isinstance(samples.timeline[0].threads[0], tuple)


@pytest.mark.parametrize(
    ("content", "why"),
    [(None, "has no report.json"), ("not json {", "not a harness report"), ("[1]", "JSON object")],
)
def test_what_is_not_a_report_is_a_one_line_usage_error(
    tmp_path: Path, content: str | None, why: str
) -> None:
    if content is not None:
        (tmp_path / "report.json").write_text(content)
    with pytest.raises(HarnessError) as info:
        load_report(tmp_path)
    assert info.value.exit_code == USAGE and why in info.value.message
    assert "\n" not in info.value.message
    with pytest.raises(HarnessError):
        load_report(tmp_path / "missing" / "report.json")


# ---------------------------------------------------------------- the page, fast


def test_page_escapes_and_loads_nothing_from_outside(tmp_path: Path) -> None:
    data = minimal_old_report()
    data["progress"] = {"output_tail": ["<img src=x onerror=alert(1)>", "done & dusted"]}
    data["samples"]["snapshots"][0]["processes"][0]["threads"][0]["name"] = "<b>evil</b>"
    data["pin"]["source"] = {"url": "https://github.com/PufferAI/PufferLib"}
    page = render_html(report_from_json(data, tmp_path))
    assert "<img" not in page and "&lt;img src=x" in page and "<b>evil" not in page
    assert "hang &lt;in&gt; env_start" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    assert page.index('id="verdict"') < page.index('id="timeline"') < page.index('id="stacks"')
    assert page.index('id="stacks"') < page.index('id="checks"') < page.index('id="pin"')
    assert page.index('id="pin"') < page.index('id="build"') < page.index('id="output"')
    assert page.index('id="output"') < page.index('id="files"')


def test_timeline_draws_the_watch_loops_timeline_and_events(tmp_path: Path) -> None:
    data = with_watch_timeline(minimal_old_report())
    data["samples"]["snapshots"][0]["t"] = 14.5  # watch-loop snapshots count from launch
    data["trigger"] = "quiescent"
    page = render_html(report_from_json(data, tmp_path))
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert len(re.findall(r'<g class="lane" data-pid="10" data-tid="10"', svg)) == 1
    assert svg.count('class="birth"') >= 2 and 'class="death"' in svg
    assert 'class="quiet"' in svg and "&lt;child&gt;" in svg and "<child>" not in svg
    assert "st st-R" in svg and "st st-S" in svg  # states over the run
    assert 'class="trigger"' in svg and "quiescent trigger" in svg


def test_pages_without_samples_or_verdict_and_with_python_stacks(tmp_path: Path) -> None:
    passed = minimal_old_report()
    passed.update(verdict={"kind": "pass", "summary": "passed"}, samples=None, trigger="exit")
    passed["checks"] = [{"name": "epochs", "status": "pass", "observed": 12, "bound": ">= 1"}]
    page = render_html(report_from_json(passed, tmp_path))
    assert "No stacks: nothing was sampled" in page and "<td>epochs</td>" in page
    running = minimal_old_report()
    running.update(verdict=None, status="running", stage="build", samples=None)
    assert "the run is running at stage build" in render_html(report_from_json(running, tmp_path))
    py = minimal_old_report()
    py["samples"]["stacks"].append(
        {
            "pid": 10,
            "tid": 10,
            "name": "python",
            "source": "py-spy",
            "python": True,
            "frames": [{"function": "wait", "file": "/app/train.py", "line": 7, "own": True}],
        }
    )
    page = render_html(report_from_json(py, tmp_path))
    assert "Native stacks: 1 thread" in page and "Python stacks: 1 thread" in page
    assert "train.py:7" in page


def test_cause_list_is_shown_when_the_verdict_has_one(tmp_path: Path) -> None:
    r = report_from_json(minimal_old_report(), tmp_path)
    assert r.verdict is not None
    # causes as a report.json from before the typed Cause holds them: plain dicts
    old_causes: list[Any] = [
        {
            "id": "openmp-after-fork",
            "sentence": "pid 11 was forked <after> an OpenMP team ran",
            "confidence": "high",
            "remedies": ["test the fix: harness compare breakout --variants stock,fixed"],
        },
        {"name": "libgomp fork hazard", "why": "an OpenMP team before fork()", "confidence": 0.9},
    ]
    r.verdict.causes = old_causes
    page = render_html(r)
    assert "Top cause:</b> pid 11 was forked &lt;after&gt; an OpenMP team ran (high" in page
    assert "[openmp-after-fork]" in page and "<li>test the fix: harness compare" in page
    assert (
        "1 more causes" in page
        and "libgomp fork hazard: an OpenMP team before fork() (90%)" in page
    )
    assert page.index("Top cause") < page.index("<dt>location</dt>")


def test_report_command_writes_the_page_and_prints_the_summary(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(minimal_old_report()))
    (folder / "stacks.txt").write_text("stacks\n")
    code, out = run_in_process(str(folder), "--html")
    assert code == 0 and "verdict" in out and "hang" in out
    page = (folder / "report.html").read_text()
    assert '<a href="stacks.txt">' in page
    code, out = run_in_process(
        str(folder / "report.json"), "--out", str(tmp_path / "elsewhere.html")
    )
    assert code == 0 and '<a href="run/stacks.txt">' in (tmp_path / "elsewhere.html").read_text()
    with pytest.raises(HarnessError):
        run_in_process(str(tmp_path / "nothing-here"))


def test_index_links_every_run_and_pivots_variants_by_commit(tmp_path: Path) -> None:
    def row(commit: str, variant: str, kind: Kind, folder: str | None = None) -> RunRow:
        where = "env_start" if kind == Kind.HANG else None
        report_dir = str(tmp_path / folder) if folder else None
        return RunRow({"commit": commit}, variant, kind, location=where, report_dir=report_dir)

    rows = [
        row("abc123", "stock", Kind.HANG, "a"),
        row("abc123", "fixed", Kind.PASS, "b"),
        row("def456", "stock", Kind.HANG, "c"),
        row("def456", "fixed", Kind.ERROR),
    ]
    rows[-1].summary = "<patch> does not apply"
    page = render_index("compare <breakout>", rows, ("commit", "variant"), tmp_path)
    assert "compare &lt;breakout&gt;" in page and "&lt;patch&gt; does not apply" in page
    for href in ("a/report.html", "b/report.html", "c/report.html"):
        assert page.count(f'href="{href}"') == 3  # the matrix cell, the row's badge and link
    assert 'class="matrix"' in page and "<th>commit</th>" in page


# ---------------------------------------------------------------- a real hang, a real browser


def _chromium() -> str:
    """The browser's path: $HARNESS_CHROMIUM, else Debian's or Ubuntu's name for Chromium.
    Missing, the test skips locally and fails under CI (setup.sh installs it)."""
    names = dict.fromkeys(n for n in (os.environ.get("HARNESS_CHROMIUM"), "chromium") if n)
    return facts.require_tool(
        *names,
        "chromium-browser",
        why="opens report.html in a real browser (setup.sh: apt-get install chromium)",
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    facts.require_module("playwright", "drives the browser (setup.sh: pip install playwright)")
    from playwright.sync_api import sync_playwright

    exe = _chromium()
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=args)
        try:
            yield b
        finally:
            b.close()


class Opened:
    def __init__(self, page: Any, errors: list[str], requests: list[str], load_ms: float) -> None:
        self.page, self.errors, self.requests, self.load_ms = page, errors, requests, load_ms


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    """`open_page(path)` → the page loaded offline, with every console error, page error and
    request for anything but the file itself recorded."""
    contexts = []

    def load(path: Path) -> Opened:
        ctx = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
        contexts.append(ctx)
        errors: list[str] = []
        requests: list[str] = []
        url = path.resolve().as_uri()

        def route(r: Any) -> None:
            if r.request.url == url:
                r.continue_()
            else:
                requests.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        page = ctx.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        t0 = time.perf_counter()
        page.goto(url, wait_until="load")
        return Opened(page, errors, requests, (time.perf_counter() - t0) * 1000)

    yield load
    for ctx in contexts:
        ctx.close()


def not_blank(png: bytes, min_colors: int = 12) -> None:
    try:
        from PIL import Image
    except ImportError:
        assert len(png) > 30_000, f"screenshot of {len(png)} bytes: blank?"
        return
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20) or []
    assert len(colors) >= min_colors, f"screenshot has {len(colors)} colours: blank?"


@pytest.mark.timeout(120)
def test_a_hostile_report_opens_in_a_browser_as_text(tmp_path: Path, open_page: Any) -> None:
    """The page of a report whose output and thread names carry markup, opened for real:
    the markup stays text (no image element, no script error), nothing is fetched."""
    data = minimal_old_report()
    data["progress"] = {"output_tail": ["<img src=x onerror=alert(1)>", "done & dusted"]}
    data["samples"]["snapshots"][0]["processes"][0]["threads"][0]["name"] = "<b>evil</b>"
    page_path = tmp_path / "report.html"
    page_path.write_text(render_html(report_from_json(data, tmp_path)))
    opened = open_page(page_path)
    page = opened.page
    assert opened.errors == [] and opened.requests == []
    assert "hang <in> env_start" in page.locator("#verdict").inner_text()
    assert "<img src=x onerror=alert(1)>" in page.locator("#output").inner_text()
    assert (
        page.locator("#output img").count() == 0 and page.locator("b", has_text="evil").count() == 0
    )


@pytest.fixture(scope="module")
def hang_dir(
    tmp_path_factory: pytest.TempPathFactory, cache_env: dict[str, str], libgomp_fork_hazard: str
) -> Path:
    """The stock replica run for real to its hang in env_start."""
    root = tmp_path_factory.mktemp("reports")
    res = harness("run", "breakout", "--timeout", "60", report_root=root, env=cache_env)
    assert res.code == 2, res.stdout + res.stderr
    assert res.report_dir is not None and verdict_of(res.loaded).location == "env_start"
    return res.report_dir


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_real_report_round_trips(hang_dir: Path) -> None:
    saved = json.loads((hang_dir / "report.json").read_text())
    loaded = load_report(hang_dir).to_json()
    assert without_artifacts(json.loads(json.dumps(loaded))) == without_artifacts(saved)
    assert set(saved["artifacts"]) <= set(loaded["artifacts"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_real_hang_page_in_a_browser(hang_dir: Path, open_page: Any) -> None:
    done = report_cmd(str(hang_dir), "--html")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hang" in done.stdout and "report.html" in done.stdout
    html_path = hang_dir / "report.html"
    t0 = time.perf_counter()
    render_html(load_report(hang_dir))
    render_ms = (time.perf_counter() - t0) * 1000
    opened = open_page(html_path)
    page = opened.page
    print(f"render {render_ms:.1f} ms, browser load {opened.load_ms:.0f} ms")
    assert opened.errors == [] and opened.requests == []
    verdict = page.locator("#verdict")
    assert "hang" in verdict.inner_text().lower() and "env_start" in verdict.inner_text()
    assert verdict.bounding_box()["y"] < page.locator("#timeline").bounding_box()["y"]
    # one lane per thread of the sampled processes, and the trigger marked
    samples = json.loads((hang_dir / "samples.json").read_text())
    threads = sampled_threads(samples)
    lanes = page.locator("#timeline-svg g.lane")
    assert lanes.count() == len(threads) >= 3
    shown = {
        (int(lanes.nth(i).get_attribute("data-pid")), int(lanes.nth(i).get_attribute("data-tid")))
        for i in range(lanes.count())
    }
    assert shown == threads
    assert page.locator("#timeline-svg .trigger").count() >= 1
    assert page.locator("#timeline-svg .dump").count() >= 1
    # the merged stack tree: env_start, with the number of threads through it, highlighted
    env_start = page.locator("#stacks .fr", has_text="env_start").first
    count = int(env_start.get_attribute("data-count"))
    assert count >= 1 and env_start.locator(".n").inner_text().strip() == str(count)
    assert "located" in (env_start.get_attribute("class") or "")
    blocks = page.locator("#stacks details.blk").count()
    assert blocks >= 1  # so that none open / none closed below says something
    page.click("text=collapse all")
    assert page.locator("#stacks details.blk[open]").count() == 0
    assert page.locator("#stacks details.blk:not([open])").count() == blocks
    page.click("text=expand all")
    assert page.locator("#stacks details.blk:not([open])").count() == 0
    assert page.locator("#stacks details.blk[open]").count() == blocks
    assert page.locator("#pin").inner_text().count("verified") >= 1
    assert page.locator("#files a", has_text="stacks.txt").count() == 1
    not_blank(page.screenshot(full_page=True))
    assert opened.errors == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_index_page_in_a_browser(hang_dir: Path, open_page: Any, tmp_path: Path) -> None:
    report = load_report(hang_dir)
    (hang_dir / "report.html").write_text(render_html(report))
    rows = [
        row_from_report(report, 2, variant="stock"),
        RunRow(variant="fixed", kind=Kind.PASS, summary="passed"),
    ]
    index = tmp_path / "index.html"
    index.write_text(render_index("compare breakout", rows, ("variant",), tmp_path))
    opened = open_page(index)
    page = opened.page
    assert opened.errors == [] and opened.requests == []
    body = page.locator("#runs tbody tr")
    assert body.count() == 2
    assert "env_start" in body.nth(0).inner_text() and "pass" in body.nth(1).inner_text()
    href = page.locator("#runs tbody tr").nth(0).locator("a").first.get_attribute("href")
    assert (tmp_path / href).resolve() == (hang_dir / "report.html").resolve()
    not_blank(page.screenshot(full_page=True), min_colors=6)
