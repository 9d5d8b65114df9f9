"""The reaper: a SIGKILLed harness leaves nothing behind (real harness, real processes, no
mocks); a normal run leaves no reaper; the reaper kills only what it recorded."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import psutil
import pytest

from harness.errors import HarnessError
from harness.execute import runner
from harness.process import pdeathsig, reaper, reaper_serve

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parent.parent


def _matching(pred: Callable[[list[str]], bool]) -> list[psutil.Process]:
    """Live (non-zombie) processes whose argv satisfies `pred`."""
    return [p for p, _ in _matching_argv(pred)]


def _matching_argv(pred: Callable[[list[str]], bool]) -> list[tuple[psutil.Process, list[str]]]:
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            argv = p.cmdline()
            if p.status() != psutil.STATUS_ZOMBIE and pred(argv):
                found.append((p, argv))
    return found


def _sleeps(token: str) -> dict[str, psutil.Process]:
    """The test's `sleep 90N.TOKEN` processes by their argument (unique to this test run, so
    that a concurrent run of the same test is never confused with ours)."""
    found = _matching_argv(lambda c: len(c) == 2 and c[0] == "sleep" and c[1].endswith(token))
    return {argv[1]: p for p, argv in found}


def _reapers_of(harness_pid: int) -> list[psutil.Process]:
    return _matching(lambda c: "serve" in c and c[-1:] == [str(harness_pid)] and _is_reaper(c))


def _is_reaper(cmdline: list[str]) -> bool:
    return any(a.endswith(os.path.join("process", "reaper_serve.py")) for a in cmdline)


def _session_members(sid: int) -> list[int]:
    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p.pid)
    return members


def _wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"{what}: not within {timeout}s")
        time.sleep(0.02)
    return time.monotonic() - t0


@pytest.fixture
def token() -> Iterator[str]:
    """A random suffix for sleep arguments; whatever still carries it at teardown is
    SIGKILLed, so a failing test leaks nothing."""
    tok = f"{random.randrange(10**6):06d}"
    yield tok
    for p in _matching(lambda c: any(a.endswith(tok) for a in c)):
        with contextlib.suppress(psutil.Error):
            p.kill()


def _harness_watch(tmp_path: Path, script: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "harness", "watch", "--report-dir", str(tmp_path / "r")]
    argv += ["--timeout", "120", "--startup", "100", "--stall", "100", "--", "bash", "-c", script]
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _sighup_ignored(p: psutil.Process) -> bool:
    with open(f"/proc/{p.pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (signal.SIGHUP - 1)))


def test_sigkilled_harness_leaves_nothing(tmp_path: Path, token: str) -> None:
    """Grandchildren that ignore SIGHUP, one of them in a session of its own (setsid): all
    gone within 2 s of a SIGKILL of the harness, and so is the reaper."""
    a, b, c = (f"{n}.{token}" for n in (901, 902, 903))
    script = (
        f'(trap "" HUP; sleep {a}) & setsid bash -c "trap \\"\\" HUP; sleep {b}" & sleep {c}; wait'
    )
    harness = _harness_watch(tmp_path, script)
    try:
        _wait_for(lambda: len(_sleeps(token)) == 3, 30, "the three sleeps")
        sleeps = _sleeps(token)
        trainer_sid = os.getsid(sleeps[c].pid)
        assert os.getsid(sleeps[b].pid) != trainer_sid  # left the trainer's session
        assert os.getsid(sleeps[a].pid) == trainer_sid
        assert _sighup_ignored(sleeps[a]) and _sighup_ignored(sleeps[b])
        (the_reaper,) = _reapers_of(harness.pid)
        assert os.getsid(the_reaper.pid) not in (os.getsid(harness.pid), trainer_sid)
        # at once: the reaper may not have scanned since the setsid; the cookie finds it
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        gone_s = _wait_for(
            lambda: not _sleeps(token) and not _reapers_of(harness.pid),
            2.0,
            "the tree and the reaper gone after SIGKILL of the harness",
        )
        print(f"SIGKILL of the harness -> empty tree in {gone_s * 1000:.0f} ms")
        assert not _session_members(trainer_sid)
        assert harness.stderr is not None
        assert b"harness reaper: the harness" in harness.stderr.read()
    finally:
        with contextlib.suppress(ProcessLookupError):
            harness.kill()
        harness.wait()
        if harness.stderr is not None:
            harness.stderr.close()


def test_normal_run_leaves_no_reaper(tmp_path: Path, token: str) -> None:
    harness = _harness_watch(tmp_path, f"sleep 0.5{token}; echo done")
    try:
        _wait_for(lambda: bool(_reapers_of(harness.pid)), 30, "the reaper")
        (the_reaper,) = _reapers_of(harness.pid)
        assert harness.wait(timeout=40) == 0
        assert not psutil.pid_exists(the_reaper.pid)  # exited and reaped by the harness
        (report,) = (tmp_path / "r").glob("*/report.json")
        assert the_reaper.pid not in json.loads(report.read_text())["cleanup"]["killed"]
        assert harness.stderr is not None
        assert b"reaper" not in harness.stderr.read()
    finally:
        with contextlib.suppress(ProcessLookupError):
            harness.kill()
        harness.wait()
        if harness.stderr is not None:
            harness.stderr.close()


def _own_session(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)


def test_reaper_kills_only_the_watched_tree(token: str) -> None:
    """The pipe closes without "done" (what a dead harness looks like to the reaper): the
    watched tree dies, an unrelated process lives; after "done" nothing is killed."""
    watched = _own_session(["bash", "-c", f"sleep 911.{token} & sleep 912.{token}; wait"])
    other = _own_session(["sleep", f"913.{token}"])
    guard = reaper.start()
    try:
        assert guard.pid is not None and guard.ctl is not None
        print(f"reaper startup: {guard.startup_s * 1000:.0f} ms")
        guard.watch(watched.pid)
        _wait_for(lambda: len(_sleeps(token)) == 3, 10, "the sleeps")
        time.sleep(2 * reaper_serve.POLL_S)
        os.close(guard.ctl)  # as if the harness died
        guard.ctl = None
        assert guard.proc is not None and guard.proc.wait(timeout=10) == 0
        assert watched.wait(timeout=2) == -signal.SIGKILL
        _wait_for(lambda: set(_sleeps(token)) == {f"913.{token}"}, 2, "the watched sleeps")
        assert other.poll() is None
    finally:
        guard.release()
        for p in (watched, other):
            p.kill()
            p.wait()


def test_the_cookie_finds_an_orphan_no_scan_saw(token: str) -> None:
    """A process that carries the trainer's cookie but whose ancestry was never seen (here:
    started outside the tree, in its own session) is killed with the tree; the same
    process without the cookie is not."""
    cookie = reaper.new_cookie()
    root = _own_session(["sleep", f"941.{token}"])
    env = {**os.environ, reaper.COOKIE_VAR: cookie}
    orphan = subprocess.Popen(["sleep", f"942.{token}"], env=env, start_new_session=True)
    stranger = _own_session(["sleep", f"943.{token}"])
    try:
        tracker = reaper_serve.Tracker(root.pid, cookie)
        tracker.scan()
        assert orphan.pid not in tracker.known  # no ancestry, no session: a plain scan misses it
        assert tracker.kill_all(deadline_s=2) == 2
        assert root.wait(timeout=2) == orphan.wait(timeout=2) == -signal.SIGKILL
        assert stranger.poll() is None
    finally:
        for p in (root, orphan, stranger):
            p.kill()
            p.wait()


def test_release_kills_nothing(token: str) -> None:
    watched = _own_session(["sleep", f"921.{token}"])
    guard = reaper.start()
    try:
        guard.watch(watched.pid)
        time.sleep(2 * reaper_serve.POLL_S)
        guard.release()
        assert guard.proc is not None and guard.proc.returncode == 0
        assert watched.poll() is None
    finally:
        watched.kill()
        watched.wait()


def test_a_recycled_pid_is_never_killed(token: str) -> None:
    """A pid recorded with another start time (what a recycled pid looks like: the same
    number, another process) is never signalled. Real pid reuse is not forced here (it would
    take tens of thousands of forks); the record is made stale instead."""
    root = _own_session(["sleep", f"931.{token}"])
    victim = _own_session(["sleep", f"932.{token}"])
    try:
        tracker = reaper_serve.Tracker(root.pid)
        st = reaper_serve.read_stat(victim.pid)
        assert st is not None
        tracker.known[victim.pid] = st[3] + 1  # the same pid, a different start time
        assert not tracker.signal(victim.pid, signal.SIGKILL)
        assert tracker.kill_all(deadline_s=2) == 1  # the root only
        assert root.wait(timeout=2) == -signal.SIGKILL
        assert victim.poll() is None
    finally:
        for p in (root, victim):
            p.kill()
            p.wait()


def test_pdeathsig_wrapper_reports_a_missing_command(tmp_path: Path) -> None:
    spec = runner.RunSpec(
        argv=["/no/such/program"],
        cwd=tmp_path,
        env=dict(os.environ),
        parser="lines",
        log_path=tmp_path / "out.log",
    )
    guard = reaper.start()
    with pytest.raises(HarnessError, match="command not found: /no/such/program"):
        runner._launch(spec, guard)
    assert guard.proc is not None and guard.proc.returncode == 0  # released, killed nothing


@pytest.mark.parametrize("script", [reaper_serve, pdeathsig], ids=lambda m: m.__name__)
def test_the_scripts_import_the_standard_library_only(script: ModuleType) -> None:
    """The reaper and the exec wrapper run as `python -I -S FILE`: no site, no harness
    package on the path, so an import of ours (even one inside a function, met only when
    the harness has died) would fail exactly when they are needed. Every import statement,
    at any depth, names a standard-library module; and each script starts bare, saying its
    usage (exit 2) on wrong arguments."""
    path = Path(str(script.__file__))
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: a relative import"
            imported.add((node.module or "").split(".")[0])
    assert "os" in imported  # the walk sees the imports
    assert sorted(imported - sys.stdlib_module_names - {"__future__"}) == []
    res = subprocess.run(
        [sys.executable, "-I", "-S", str(path)], capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 2 and "usage:" in res.stderr, res.stderr
