"""Under CI a test that needs a tool setup.sh installs fails when the tool is missing; here
(without CI) it skips. Real pytest runs in a subprocess, with the tool hidden from PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import facts
from tests.harness_cli import ROOT


def path_without(tmp_path: Path, *hidden: str) -> str:
    """A PATH of one folder that links every program of this PATH but the `hidden` ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            link = bin_dir / entry.name
            if entry.name not in hidden and not link.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return str(bin_dir)


def pytest_run(tmp_path: Path, nodeid: str, ci: bool, *hidden: str) -> tuple[int, str]:
    """`pytest NODEID` alone (one process, no xdist), with `hidden` off PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HARNESS_CHROMIUM")}
    env["PATH"] = path_without(tmp_path, *hidden)
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", nodeid]
    argv += ["--basetemp", str(tmp_path / "t")]
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    return done.returncode, done.stdout + done.stderr


BROWSER = "tests/test_report_html.py::test_a_hostile_report_opens_in_a_browser_as_text"
GDB = "tests/test_watch.py::test_without_eu_stack_native_stacks_fall_back_to_gdb"


@pytest.mark.timeout(300)
def test_under_ci_a_browser_test_without_chromium_fails_naming_it(tmp_path: Path) -> None:
    code, out = pytest_run(tmp_path, BROWSER, True, "chromium", "chromium-browser")
    assert code == 1, out
    assert "1 failed" in out or "1 error" in out, out
    assert "chromium or chromium-browser (not on PATH, nor in" in out, out
    assert "CI must run every test" in out


@pytest.mark.timeout(300)
def test_without_ci_the_same_test_skips_naming_it(tmp_path: Path) -> None:
    code, out = pytest_run(tmp_path, BROWSER, False, "chromium", "chromium-browser")
    assert code == 0, out
    assert "1 skipped" in out and "chromium or chromium-browser (not on PATH, nor in" in out, out


@pytest.mark.timeout(300)
def test_under_ci_the_needs_tool_marker_fails_without_gdb(tmp_path: Path) -> None:
    code, out = pytest_run(tmp_path, GDB, True, "gdb")
    assert code == 1, out
    assert "1 error" in out and "gdb (not on PATH, nor in" in out, out


@pytest.mark.timeout(300)
def test_under_ci_a_failed_openmp_probe_fails_the_hang_tests(tmp_path: Path) -> None:
    """Without gcc the doctor's OpenMP probe cannot tell the runtime: the hang tests of the
    stock replica (libgomp_fork_hazard) fail under CI instead of skipping."""
    test = "tests/test_run_replica.py::test_interrupting_a_run_leaves_a_partial_report"
    code, out = pytest_run(tmp_path, test, True, "gcc", "cc")
    assert code == 1, out
    assert "the OpenMP runtime probe (gcc not found on PATH) is missing" in out, out
    assert "CI must run every test" in out


def test_missing_skips_here_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"no-such-tool-4f2 .* is missing: why"):
        facts.require_tool("no-such-tool-4f2", why="why")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run every test, but no-such"):
        facts.require_tool("no-such-tool-4f2", why="why")
    assert facts.require_tool("no-such-tool-4f2", sys.executable, why="why") == sys.executable
    assert facts.require_tool("sh", why="why") is not None
