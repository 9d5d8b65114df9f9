"""triage.html and issue.md (triage/story.py): written from a TriageResult built by hand in
the two shapes the issue names (the replica: a hang in env_start, openmp-after-fork, knobs
ruled out, fixes confirmed, History skipped for want of a git source; and a git history with
a first bad commit), over real files standing in for the run folders. issue.md has every
section and nothing unrendered; hostile run text (markup, Markdown, bidi controls) stays
text; a run folder that is gone is not linked; triage.html opens in the real Chromium with
no console error, every section, and every link leading to a file that exists."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from harness.doctor.fingerprint import HostFingerprint
from harness.outcome import Kind
from harness.source.blame import HangBlame, LineCommit
from harness.triage.model import Step, TriageResult
from harness.triage.results import (
    CauseFact,
    ExplainResult,
    FirstBad,
    FixesResult,
    HistoryResult,
    KnobFact,
    KnobsResult,
    ProbeFact,
    ReproduceResult,
    SearchedCommit,
    VariantFact,
    read_result,
)
from harness.triage.story import write_story
from harness.triage.story_facts import Evidence
from harness.vocab import (
    BisectClass,
    BisectStatus,
    BlameHow,
    Confidence,
    Decision,
    DoctorStatus,
    KnobEffect,
    Mechanism,
    StepStatus,
    TriageStep,
)
from tests.mdrender import read, render
from tests.test_report_html import browser, open_page  # noqa: F401  (the fixtures, reused)

SECTIONS = ("Environment", "Symptom", "Reproduction", "Blame", "Knobs", "Fix")
STORY_IDS = ("verdict", "steps", "what", "where", "why", "not-matter", "fixes", "when", "todo")

HOST: dict[str, Any] = {
    "cpus_online": 2,
    "cpus_online_list": "0-1",
    "trainer_affinity": [0, 1],
    "affinity": [0, 1],
    "cpu_quota": None,
    "memory_limit": 8 * 2**30,
    "load": [1.52, 1.1, 0.9],
    "kernel": "6.1.0-28-cloud-amd64",
    "kernel_version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1",
    "machine": "x86_64",
    "libc": "glibc 2.36",
    "compiler": "cc (Debian 12.2.0-14) 12.2.0",
    "openmp_runtime": "/usr/lib/gcc/x86_64-linux-gnu/12/libgomp.so",
    "env": {"OMP_NUM_THREADS": "2"},
    "gpu_driver": "",
    "gpus": [],
    "container": ["/.dockerenv exists"],
    "cgroup": "/user.slice",
}


def update(r: TriageResult, name: TriageStep, **changes: Any) -> None:
    """The step's result with `changes` (results are frozen: a new one replaces it)."""
    step = r.step(name)
    assert step.result is not None
    step.result = replace(step.result, **changes)


def run_folder(root: Path, rel: str, *files: str) -> str:
    """A run or table folder with real files in it (what triage.html links)."""
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        text = "<!DOCTYPE html><title>x</title><p>run</p>" if name.endswith(".html") else "{}"
        (folder / name).write_text(text)
    return rel


def replica(root: Path) -> TriageResult:
    """A triage of the replica (a path source): what the engine records for it."""
    rep = run_folder(root, "reproduce", "repeat.json", "index.html")
    first = run_folder(root, "reproduce/stock/runs/001", "report.html", "report.json")
    knobs = run_folder(root, "knobs", "sweep.json", "index.html")
    fixes = run_folder(root, "fixes", "compare.json", "index.html")
    frames = ("env_start", "GOMP_parallel", "gomp_team_start", "futex_wait")
    steps = [
        Step(
            TriageStep.REPRODUCE,
            StepStatus.DONE,
            headline="hang 4/4 in env_start (openmp-after-fork)",
            result=ReproduceResult(
                variant="stock",
                host=None,
                runs=4,
                counts={Kind.HANG: 4},
                failure_rate=1.0,
                failure_rate_ci95=(0.51, 1.0),
                summary="hang: no progress for 20 s, every thread waiting in env_start",
                kind=Kind.HANG,
                location="env_start",
                cause="openmp-after-fork",
                folder=rep,
                first_failure=first,
                tried_hosts=(),
            ),
            runs=[rep],
            estimate_s=160.0,
            duration_s=142.3,
            runs_made=4,
            builds_made=1,
        ),
        Step(
            TriageStep.EXPLAIN,
            StepStatus.DONE,
            headline="env_start waits on an OpenMP team started before fork",
            result=ExplainResult(
                report=first,
                kind=Kind.HANG,
                mechanism=Mechanism.DEADLOCK,
                location="env_start",
                location_frames=frames,
                causes=(
                    CauseFact(
                        id="openmp-after-fork",
                        title="OpenMP used in a forked child",
                        confidence=Confidence.HIGH,
                        sentence="libgomp's thread pool does not survive fork: the child "
                        "waits for workers that exist only in the parent",
                        remedies=("build without -fopenmp", "OMP_NUM_THREADS=1 in workers"),
                    ),
                    CauseFact(id="lock-order", title="lock order", confidence=Confidence.LOW),
                ),
                waits=("main (pid 4242) waits in futex for gomp team thread 4243 (absent)",),
                blame=None,
                doctor=(
                    ProbeFact(
                        name="openmp-after-fork",
                        status=DoctorStatus.FAIL,
                        detail="a child of a process that used OpenMP hangs in its region",
                    ),
                ),
            ),
            runs=[first],
            estimate_s=5.0,
            duration_s=1.2,
        ),
        Step(
            TriageStep.KNOBS,
            StepStatus.DONE,
            headline="2 knobs ruled out, 1 changes it",
            result=KnobsResult(
                folder=knobs,
                knobs=(
                    KnobFact(
                        label="--vec.num-threads",
                        values=("1", "2"),
                        effect=KnobEffect.RULED_OUT,
                        line="hang 3/3 at every value",
                    ),
                    KnobFact(
                        label="--base.async",
                        values=("0", "1"),
                        effect=KnobEffect.RULED_OUT,
                        line="hang 3/3 at every value",
                    ),
                    KnobFact(
                        label="OMP_NUM_THREADS",
                        values=("1", "2"),
                        effect=KnobEffect.CHANGES,
                        line="1: pass 3/3; 2: hang 3/3",
                    ),
                ),
                conclusion="the hang needs an OpenMP team of more than one thread",
            ),
            runs=[knobs],
            estimate_s=300.0,
            duration_s=281.0,
            runs_made=12,
        ),
        Step(
            TriageStep.FIXES,
            StepStatus.DONE,
            headline="omp-free and fixed pass (confirmed)",
            result=FixesResult(
                folder=fixes,
                decision=Decision.CONFIRMED,
                confirmed=("omp-free", "fixed"),
                fix_variant="omp-free",
                fix_text="omp-free passes 4/4 runs against 4/4 of stock",
                variants=(
                    VariantFact(variant="stock", summary="hang 4/4", runs=4, kinds={Kind.HANG: 4}),
                    VariantFact(
                        variant="omp-free", summary="pass 4/4", runs=4, kinds={Kind.PASS: 4}
                    ),
                    VariantFact(variant="fixed", summary="pass 4/4", runs=4, kinds={Kind.PASS: 4}),
                ),
                summary="omp-free: 0/4 failed against stock's 4/4",
                changes=("setup.py: -fopenmp removed from extra_compile_args",),
            ),
            runs=[fixes],
            estimate_s=300.0,
            duration_s=250.5,
            runs_made=8,
            builds_made=2,
        ),
        Step(TriageStep.HISTORY, StepStatus.SKIPPED, reason="no git source (a path source)"),
    ]
    return TriageResult(
        env="breakout",
        directory=root,
        steps=steps,
        pin="replica",
        started_at="2025-06-01T12:00:00",
        finished_at="2025-06-01T12:11:15",
        budget_s=900.0,
        spent_s=675.0,
        reproduced=True,
        fix_confirmed="omp-free",
        conclusion=[
            "hang 4/4 in env_start: openmp-after-fork",
            "the knobs --vec.num-threads, --base.async do not matter; OMP_NUM_THREADS does",
            "omp-free fixes it (confirmed)",
        ],
        host=HostFingerprint(**HOST),
        commands=[
            "harness run breakout --pin replica --repeat 4",
            "harness compare breakout --pin replica --variant stock --variant omp-free",
        ],
    )


def line_commit(sha: str, subject: str, line: int, how: BlameHow) -> LineCommit:
    return LineCommit(
        sha, subject, "Dev <dev@example.org>", "2025-03-02T10:00:00+00:00", VECTOR_C, line, how
    )


VECTOR_C = "pufferlib/vector.c"
LINE_SHA = "3f2a9c1d5e6f708192a3b4c5d6e7f8091a2b3c4d"
PRAGMA_SHA = "107717e70a1b2c3d4e5f60718293a4b5c6d7e8f9"
REINDENT_SHA = "5a5a5a5a00000000000000000000000000000000"
BLAME = HangBlame(
    file=VECTOR_C,
    line=212,
    rev="c0ffee12",
    commit=line_commit(LINE_SHA, "vec: start the envs", 212, BlameHow.BLAME),
    function="vec_start",
    pragma="#pragma omp parallel for",
    pragma_line=208,
    # the pragma line's last change is a reindent; `git log -S` finds the commit that added it
    pragma_commit=line_commit(REINDENT_SHA, "reindent", 208, BlameHow.BLAME),
    pragma_introduced=line_commit(PRAGMA_SHA, "compact everything", 208, BlameHow.LOG_S),
)


def git_history(root: Path) -> TriageResult:
    """A triage of a fork pin over a git history, with the first bad commit found."""
    r = replica(root)
    r.pin = "fork"
    hist = run_folder(root, "history", "bisect.json", "index.html")
    update(r, TriageStep.EXPLAIN, blame=BLAME)
    history = r.step(TriageStep.HISTORY)
    history.status, history.reason = StepStatus.DONE, ""
    history.headline = "first bad: 107717e7 compact everything"
    history.runs = [hist]
    history.duration_s, history.estimate_s = 210.0, 240.0
    history.result = HistoryResult(
        good="a1b2c3d4",
        good_how="found searching back 8 commits",
        searched=(
            SearchedCommit(sha="c0ffee12", classification=BisectClass.BAD),
            SearchedCommit(sha="a1b2c3d4", classification=BisectClass.GOOD),
        ),
        bad="c0ffee12",
        status=BisectStatus.FOUND,
        first_bad=FirstBad(
            sha="107717e7",
            subject="compact everything",
            author="Dev <dev@example.org>",
            date="2025-03-02",
            diffstat=" pufferlib/vector.c | 14 ++++++++------\n 1 file changed",
            blame=BLAME,
        ),
        possible=(),
        folder=hist,
        confidence=0.95,
    )
    r.first_bad = "107717e7"
    return r


def sections(md: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", md.split("\n---\n")[0], flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def check_rendered(text: str) -> None:
    """Nothing unrendered: no Python None, no leftover format field, no repr of a dict."""
    assert text.strip()
    assert "None" not in text and "{'" not in text
    assert not re.search(r"\{[a-z_]+\}", text), re.search(r"\{[a-z_]+\}", text)


# ---------------------------------------------------------------- issue.md


def test_replica_issue_has_every_section_and_says_history_was_not_investigated(
    tmp_path: Path,
) -> None:
    written = write_story(replica(tmp_path))
    assert sorted(p.name for p in written) == ["issue.md", "triage.html"]
    md = (tmp_path / "issue.md").read_text()
    check_rendered(md)
    got = sections(md)
    assert list(got) == list(SECTIONS)
    assert "glibc 2.36" in got["Environment"] and "0-1" in got["Environment"]
    assert "libgomp.so" in got["Environment"] and "OMP\\_NUM\\_THREADS" not in md  # `_` kept
    assert "8.0 GiB" in got["Environment"] and "none found" in got["Environment"]
    assert "4/4 runs failed (100%, 95% interval 51%–100%)" in got["Symptom"]
    assert "`env_start`" in got["Symptom"] and "openmp-after-fork" in got["Symptom"]
    assert "waits in futex" in got["Symptom"] and "gomp\\_team" not in got["Symptom"]
    assert "harness run breakout --pin replica --repeat 4" in got["Reproduction"]
    assert "First bad commit: not investigated: no git source (a path source)." in got["Blame"]
    knobs = got["Knobs"]
    assert knobs.index("Ruled out") < knobs.index("`--vec.num-threads`")
    assert knobs.index("Change the outcome") < knobs.index("`OMP_NUM_THREADS`")
    assert "Fix: omp-free passes 4/4 runs against 4/4 of stock." in got["Fix"]
    assert "-fopenmp removed" in got["Fix"]


def test_git_history_issue_names_the_first_bad_commit_and_the_pragmas(tmp_path: Path) -> None:
    """The located line's commit and its construct's (the pickaxe's, not the reindent's
    that blame of the pragma line gives) by short sha and subject; the first bad commit."""
    write_story(git_history(tmp_path))
    md = (tmp_path / "issue.md").read_text()
    check_rendered(md)
    blame = sections(md)["Blame"]
    assert "First bad commit: `107717e7` compact everything" in blame
    construct = "**the commit that brought its construct in**: `107717e70a1b` compact everything"
    assert construct in blame and "reindent" not in blame
    assert "`pufferlib/vector.c:212`: `3f2a9c1d5e6f` vec: start the envs" in blame
    assert "pufferlib/vector.c | 14" in blame and "found searching back 8 commits" in blame
    assert "**confidence**: 0.95" in blame
    assert "- **commit**: `c0ffee12`" in sections(md)["Environment"]  # History's bad end
    page = (tmp_path / "triage.html").read_text()
    assert "<dt>its commit</dt><dd>3f2a9c1d5e6f vec: start the envs</dd>" in page
    assert "<dt>the construct&#x27;s commit</dt><dd>107717e70a1b compact everything</dd>" in page


def test_a_blame_without_its_commits_says_not_known(tmp_path: Path) -> None:
    r = git_history(tmp_path)
    lost = replace(BLAME, commit=None, pragma_commit=None, pragma_introduced=None, reason="x")
    update(r, TriageStep.EXPLAIN, blame=lost)
    write_story(r)
    blame = sections((tmp_path / "issue.md").read_text())["Blame"]
    assert "- **the located line** `pufferlib/vector.c:212`: not known" in blame
    assert "- **the commit that brought its construct in**: not known" in blame
    page = (tmp_path / "triage.html").read_text()
    assert "<dt>its commit</dt><dd>not known</dd>" in page


def test_steps_that_did_not_run_say_why_in_one_line(tmp_path: Path) -> None:
    r = replica(tmp_path)
    for name, status, reason in (
        (TriageStep.KNOBS, StepStatus.SKIPPED, "budget: needs 300 s, 40 s left"),
        (TriageStep.FIXES, StepStatus.PENDING, ""),
        (TriageStep.EXPLAIN, StepStatus.FAILED, "gdb is missing"),
    ):
        step = r.step(name)
        step.status, step.reason, step.result = status, reason, None
    write_story(r)
    got = sections((tmp_path / "issue.md").read_text())
    assert got["Knobs"].strip() == "not investigated: budget: needs 300 s, 40 s left"
    assert got["Fix"].strip() == "not investigated yet"
    assert "could not be investigated: gdb is missing" in got["Symptom"]
    page = (tmp_path / "triage.html").read_text()
    assert "skipped: budget: needs 300 s, 40 s left" in page
    assert "not reached: no reason recorded (a triage continues with --resume)" in page
    assert "failed: gdb is missing" in page


HOSTILE = "<script>alert(1)</script> [x](http://evil) # \u202eevil\u202c `tick` | cell"


def test_hostile_run_text_stays_text(tmp_path: Path) -> None:
    r = replica(tmp_path)
    update(r, TriageStep.REPRODUCE, summary=HOSTILE)
    waits = (HOSTILE, "> " + HOSTILE, "# " + HOSTILE, "1. " + HOSTILE)
    update(r, TriageStep.EXPLAIN, location=HOSTILE, waits=waits)
    r.step(TriageStep.REPRODUCE).headline = "# " + HOSTILE
    r.commands.append("echo ```\n## not a heading")
    write_story(r)
    md = (tmp_path / "issue.md").read_text()
    # inside a code span markup is shown as it is; outside one it is escaped for Markdown
    outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", md)
    assert "\\<script>alert(1)\\</script>" in outside_code
    assert "``<script>alert(1)</script>" in md
    assert "\u202e" not in md and "\u202c" not in md
    assert "[x](http" not in outside_code and "\\[x\\](http" in md
    assert list(sections(md)) == list(SECTIONS)  # no heading came from run text
    # rendered: the markup is the text a reader sees, never an element
    tags, shown = read(md)
    assert "script" not in tags and tags.count("blockquote") == 1, tags  # the story's own
    assert tags.count("ol") == 0 and tags.count("h2") == len(SECTIONS), tags
    assert 'href="http://evil"' not in render(md)
    assert shown.count("<script>alert(1)</script>") >= 5  # every copy shown as text
    fences = re.findall(r"^(`{3,})sh$", md, flags=re.MULTILINE)
    assert fences and len(fences[0]) > 3  # longer than the ``` inside the command
    page = (tmp_path / "triage.html").read_text()
    assert "<script>alert" not in page and "\u202e" not in page


DOCTOR_DETAIL = (
    "this OpenMP runtime deadlocks in a forked child (libgomp fork hazard): child hung > 3.0s "
    "(child state S in futex_do_wait); runtime libgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1"
)


def test_issue_md_reads_raw_as_it_renders(tmp_path: Path) -> None:
    """issue.md is pasted upstream and read raw too: a `>` or `=>` that Markdown does not
    read as markup stays as written (it once was `child hung &gt; 3.0s`, `=&gt;`), and the
    rendered line says the same."""
    r = replica(tmp_path)
    doctor = (
        ProbeFact(name="openmp-after-fork", status=DoctorStatus.WARN, detail=DOCTOR_DETAIL),
        ProbeFact(name="openmp", status=DoctorStatus.OK, detail="team of 2; a < b && c -> d"),
    )
    update(r, TriageStep.EXPLAIN, doctor=doctor)
    write_story(r)
    md = (tmp_path / "issue.md").read_text()
    lines = md.splitlines()
    assert f"  - openmp-after-fork: warn — {DOCTOR_DETAIL}" in lines, md
    assert "  - openmp: ok — team of 2; a < b && c -> d" in lines, md
    assert not re.search(r"&(gt|lt|amp|quot|#\d+|#x[0-9a-f]+);", md), md  # no entity anywhere
    _, shown = read(md)
    assert DOCTOR_DETAIL in shown and "a < b && c -> d" in shown


def test_a_run_folder_that_is_gone_is_not_linked(tmp_path: Path) -> None:
    r = replica(tmp_path)
    update(r, TriageStep.FIXES, folder="fixes-gone")
    fixes = r.step(TriageStep.FIXES)
    fixes.runs = ["fixes-gone", "../outside", str(tmp_path.parent / "elsewhere")]
    outside = tmp_path.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "index.html").write_text("x")
    (tmp_path / "link-out").symlink_to(outside)
    update(r, TriageStep.KNOBS, folder="link-out")
    write_story(r)
    page = (tmp_path / "triage.html").read_text()
    hrefs = [unquote(h) for h in re.findall(r'href="([^"]+)"', page)]
    assert hrefs and "reproduce/repeat.json" in hrefs
    assert all((tmp_path / h).is_file() for h in hrefs)
    assert not any("gone" in h or ".." in h or "link-out" in h for h in hrefs)
    assert '<li>fixes-gone <span class="muted">(no file)</span></li>' in page  # named, as text


def test_evidence_links_only_regular_files_inside(tmp_path: Path) -> None:
    run_folder(tmp_path, "a/b", "report.html")
    ev = Evidence(tmp_path)
    assert ev.page_of("a/b") == "a/b/report.html"
    assert ev.page_of(str(tmp_path / "a/b")) == "a/b/report.html"
    assert ev.page_of("a/b/report.html") == "a/b/report.html"
    assert ev.page_of("a") is None and ev.page_of("/etc") is None and ev.page_of(None) is None
    assert ev.page_of("../" + tmp_path.name + "/a/b") is None


def test_results_missing_every_key_still_render(tmp_path: Path) -> None:
    """Every key of a result is optional: a step done with nothing recorded, or with a
    triage.json result that lacks its keys (each reads back as its default), is "not
    known", not a crash."""
    r = replica(tmp_path)
    for step in r.steps:
        step.status, step.result = StepStatus.DONE, None
    r.step(TriageStep.EXPLAIN).result = read_result(TriageStep.EXPLAIN, {"waits": []})
    r.step(TriageStep.REPRODUCE).result = read_result(TriageStep.REPRODUCE, {"counts": {}})
    r.step(TriageStep.HISTORY).result = read_result(TriageStep.HISTORY, {"first_bad": {}})
    assert r.found(ExplainResult) == ExplainResult()
    assert r.found(HistoryResult).first_bad == FirstBad()
    r.host, r.commands, r.fix_confirmed = None, [], None
    write_story(r)
    md = (tmp_path / "issue.md").read_text()
    check_rendered(md)
    got = sections(md)
    assert list(got) == list(SECTIONS)
    assert "- **host**: not known" in got["Environment"]
    assert "- **rate**: not known" in got["Symptom"] and "- **cause**: not known" in got["Symptom"]
    assert "First bad commit: not found (not known)." in got["Blame"]
    assert "No fix confirmed (not known)." in got["Fix"]
    page = (tmp_path / "triage.html").read_text()
    assert "No cause named (not known)." in page


@pytest.mark.parametrize(
    ("step", "junk", "key"),
    [
        (TriageStep.EXPLAIN, {"causes": "nope"}, "result.causes"),
        (TriageStep.EXPLAIN, {"waits": 3}, "result.waits"),
        (TriageStep.EXPLAIN, {"blame": [1]}, "result.blame"),
        (TriageStep.REPRODUCE, {"counts": {"hang": "two"}}, "result.counts.hang"),
        (TriageStep.REPRODUCE, {"failure_rate_ci95": [None]}, "result.failure_rate_ci95"),
        (TriageStep.KNOBS, {"knobs": [{"effect": "maybe"}]}, "result.knobs[0].effect"),
    ],
)
def test_a_damaged_result_is_refused_naming_its_key(
    tmp_path: Path, step: TriageStep, junk: dict[str, Any], key: str
) -> None:
    """A result of the wrong type in triage.json (a damaged file) is refused where it is
    read, naming its key; the story only ever sees typed results."""
    with pytest.raises(ValueError, match=re.escape(key)):
        read_result(step, junk)
    data = git_history(tmp_path).to_json()
    next(s for s in data["steps"] if s["name"] == str(step))["result"].update(junk)
    with pytest.raises(ValueError, match=re.escape(key)):
        TriageResult.from_json(data, tmp_path)


def test_triage_json_round_trip_renders_the_same(tmp_path: Path) -> None:
    r = git_history(tmp_path)
    write_story(r)
    first = (tmp_path / "issue.md").read_text()
    again = TriageResult.from_json(json.loads(json.dumps(r.to_json())), tmp_path)
    write_story(again)
    assert (tmp_path / "issue.md").read_text() == first


# ---------------------------------------------------------------- triage.html in Chromium


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", [replica, git_history])
def test_story_page_in_a_browser(tmp_path: Path, open_page: Any, shape: Any) -> None:  # noqa: F811
    r = shape(tmp_path)
    update(r, TriageStep.EXPLAIN, waits=("<img src=x onerror=alert(1)> waits",))
    write_story(r)
    opened = open_page(tmp_path / "triage.html")
    page = opened.page
    assert opened.errors == [] and opened.requests == []
    for ident in STORY_IDS:
        assert page.locator(f"#{ident}").count() == 1, ident
    assert page.locator("img").count() == 0
    assert "<img src=x" in page.locator("#where").inner_text()
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    assert len(hrefs) >= 6
    for href in hrefs:
        assert href.startswith("file://"), href
        target = Path(unquote(href.removeprefix("file://")))
        assert target.is_file() and target.is_relative_to(tmp_path.resolve()), href
    when = page.locator("#when").inner_text()
    if shape is replica:
        assert "skipped: no git source" in when
    else:
        assert "107717e7 compact everything" in when
    assert "11.2 min spent of 15.0 min" in page.locator("#verdict").inner_text()
