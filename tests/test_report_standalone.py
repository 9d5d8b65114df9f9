"""Reports that stand on their own: `harness check` on a report reads only its folder (the
same results after later runs, on a copy, without the build cache); a harness killed with
SIGKILL leaves a report that reads `abandoned`; an internal error's traceback lands under
--report-dir; a --steps that is not a whole number of epochs is refused before the build.
Real runs of the replica and real processes; no subprocess is mocked."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness import cli
from harness.outcome import Kind
from harness.pipeline import run as pipeline_run
from harness.report import store
from harness.report.load import load_report
from harness.vocab import RunStatus, Stage
from tests.harness_cli import (
    ROOT,
    HarnessResult,
    harness,
    only_report_dir,
    run_replica,
    verdict_of,
)

PROGRAMS = Path(__file__).resolve().parent / "programs"

pytestmark = pytest.mark.timeout(300)


def _check(folder: Path, tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    res = harness("check", str(folder), "--json", report_root=tmp_path, env=env)
    assert res.code in (0, 1), res.stderr
    return res.code, json.loads(res.stdout)


def _fixed_run(steps: int, root: Path, env: dict[str, str]) -> HarnessResult:
    res = harness(
        "run", "breakout", "--variant", "fixed", "--steps", str(steps), report_root=root, env=env
    )
    assert res.code == 0, res.stdout + res.stderr
    assert verdict_of(res.loaded).kind is Kind.PASS
    return res


@pytest.mark.slow
def test_a_report_is_checked_from_its_own_folder(tmp_path: Path) -> None:
    # a build cache of its own: the test deletes it below (the session's shared one serves
    # other workers' runs at the same time)
    cache_env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    # two passing runs of one build, the longer first: the build tree's logs/ then holds
    # the second run's end-of-run log, newer than the first run's start
    first = _fixed_run(524_288, tmp_path / "a", cache_env)
    _fixed_run(262_144, tmp_path / "b", cache_env)
    report = first.report
    assert first.report_dir is not None
    evidence = report["evidence"]
    for name in ("pin", "scenario", "build_log", "config:config/breakout.ini", "endlog_ini"):
        assert (first.report_dir / evidence[name]).is_file(), (name, evidence)
    assert (first.report_dir / evidence["build_log"]).stat().st_size <= 64 * 1024

    code, out = _check(first.report_dir, tmp_path, cache_env)
    assert (code, out["checks"]) == (0, report["checks"])
    assert out["status"] == "complete" and out["notes"] == []

    # elsewhere, with the build cache (tree, end-of-run logs, config files) gone
    copy = tmp_path / "elsewhere" / first.report_dir.name
    shutil.copytree(first.report_dir, copy)
    shutil.rmtree(cache_env["HARNESS_CACHE_DIR"])
    assert not Path(report["build"]["tree"]).exists()
    code, out = _check(copy, tmp_path, cache_env)
    assert (code, out["checks"]) == (0, report["checks"])

    # a report from before evidence/ is checked the old way, and says it may not reproduce
    old = tmp_path / "old" / first.report_dir.name
    shutil.copytree(first.report_dir, old)
    shutil.rmtree(old / "evidence")
    data = json.loads((old / "report.json").read_text())
    del data["evidence"]
    (old / "report.json").write_text(json.dumps(data))
    _, out = _check(old, tmp_path, cache_env)
    assert any("may not be reproducible" in n for n in out["notes"]), out["notes"]


def _kill_leftovers(marker: str) -> list[int]:
    """Kill (SIGKILL) and reap every process whose command line mentions `marker`."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and any(marker in a for a in p.info["cmdline"] or ()):
                p.kill()
                found.append(p)
    for p in found:
        with contextlib.suppress(psutil.Error):
            p.wait(timeout=10)
    return [p.pid for p in found]


def test_a_killed_harness_leaves_a_report_that_reads_abandoned(tmp_path: Path) -> None:
    program = tmp_path / "slow_printer.py"  # its command line names tmp_path
    shutil.copy(PROGRAMS / "slow_printer.py", program)
    reports = tmp_path / "reports"
    argv = [sys.executable, "-m", "harness", "watch", "--timeout", "120"]
    argv += ["--report-dir", str(reports), "--", sys.executable, str(program), "100"]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        folder = None
        while time.monotonic() < deadline:
            folder = only_report_dir(reports)
            log = folder / "output.log" if folder else None
            if log is not None and log.is_file() and log.stat().st_size > 0:
                break
            time.sleep(0.1)
        assert folder is not None and (folder / "report.json").is_file()
        live = store.load_status(folder)
        assert (live.status, live.stage) == ("running", "run"), live.why
        assert live.data["harness_pid"] == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # what the harness could not kill, killed first (a reaper process may have done it)
        _kill_leftovers(str(tmp_path))

    seen = store.load_status(folder)
    assert (seen.status, seen.stored, seen.stage) == ("abandoned", "running", "run")
    assert f"harness pid {proc.pid}" in seen.why

    res = harness("check", str(folder), report_root=tmp_path)
    assert res.code == 1, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "abandoned at stage run" in res.stderr and "did not finish" in res.stderr
    marked = load_report(folder)
    assert (marked.status, marked.stage) == (RunStatus.ABANDONED, Stage.RUN)
    assert marked.abandoned_at and marked.last_written_at == seen.written_at
    assert any(n.startswith("abandoned:") for n in marked.notes)
    again = store.load_status(folder)
    assert (again.status, again.stored) == ("abandoned", "abandoned")


def test_an_internal_error_leaves_its_traceback_under_report_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom while preparing")

    monkeypatch.setattr(pipeline_run, "verify_prepare_build", broken)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = cli.main(["run", "breakout", "--report-dir", str(tmp_path / "reports")])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    traceback_file = tmp_path / "reports" / "harness-internal-error.txt"
    assert code == 70
    text = traceback_file.read_text()
    assert "Traceback" in text and "RuntimeError: boom while preparing" in text
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(traceback_file) in err[0]
    folder = only_report_dir(tmp_path / "reports")
    assert folder is not None
    report = load_report(folder)
    assert (report.status, report.stage) == (RunStatus.FAILED, Stage.DONE)
    assert any("boom while preparing" in n for n in report.notes)


def test_steps_that_are_not_whole_epochs_are_refused_before_the_build(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {"HARNESS_CACHE_DIR": str(cache)}
    res = harness(
        "run", "breakout", "--variant", "fixed", "--steps", "1000000", report_root=tmp_path, env=env
    )
    assert res.code == 5, res.stderr
    assert res.stderr.strip() == (
        "harness: error: --steps 1000000 is not a whole number of epochs (epoch = 262144 "
        "steps with this config): use 786432 or 1048576"
    )
    # the trainer's own flags count: half the agents, half the epoch
    res = run_replica(tmp_path, env, "--steps", "1000000", "--arg=--vec.total-agents=2048")
    assert res.code == 5 and "epoch = 131072" in res.stderr and "917504 or 1048576" in res.stderr
    assert only_report_dir(tmp_path) is None and not (cache / "builds").exists()
