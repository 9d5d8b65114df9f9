"""`pytest --hang-watch`: the options and the hooks (inert without the flag).

In each process that runs tests (pytest alone, or each xdist worker; the controller runs
none) a watcher is started at the first test, outside pytest's tree, and told each test
phase. A hang it finds fails that test (`listener`); the xdist controller adds the verdict
to the report of a worker that ended itself (`pytest_handlecrashitem`); a session started
again after a hang in native code replays what ran before (`resume`)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import harness
from harness.pytest_plugin import channel, procstart, resume, threads
from harness.pytest_plugin.listener import Control, Listener, install_handler

DEFAULT_QUIESCENT_S = 5.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_REPORT_DIR = "harness-reports"
LAUNCH_S = 10.0  # the launcher only starts the watcher and exits
JOIN_LEFT_S = 1.0  # at the end, how long threads a hung test left get to finish
PR_SET_PTRACER = 0x59616D61  # yama: let this pid (and its children) trace us
# starts the watcher and exits, so that the watcher is nobody's child in pytest's tree
_LAUNCHER = (
    "import json, subprocess, sys\n"
    "a = json.loads(sys.argv[1])\n"
    "subprocess.Popen(a['cmd'], pass_fds=a['fds'], stdin=subprocess.DEVNULL,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hang-watch", "hang diagnosis (puffer-harness)")
    group.addoption(
        "--hang-watch",
        action="store_true",
        help="watch each test's process tree: a test that hangs fails with the verdict, "
        "its top cause and a report folder, and the session goes on",
    )
    group.addoption(
        "--hang-quiescent",
        type=float,
        default=DEFAULT_QUIESCENT_S,
        metavar="S",
        help="a test whose whole tree is blocked on itself this long is hung (default "
        f"{DEFAULT_QUIESCENT_S:g}; 0: off)",
    )
    group.addoption(
        "--hang-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"a test running longer is diagnosed and failed (default {DEFAULT_TIMEOUT_S:g}; "
        "0: off)",
    )
    group.addoption(
        "--hang-report-dir",
        default=DEFAULT_REPORT_DIR,
        metavar="DIR",
        help=f"where hung tests' report folders go (default {DEFAULT_REPORT_DIR})",
    )


def pytest_configure(config: pytest.Config) -> None:
    # a resumed session's state comes in the environment, never passed on to children
    state_path = os.environ.pop(resume.ENV, None)
    if not config.getoption("hang_watch"):
        return
    report_dir = config.invocation_params.dir / str(config.getoption("hang_report_dir"))
    _check_report_dir(report_dir)
    for name in ("hang_quiescent", "hang_timeout"):
        if float(config.getoption(name)) < 0:
            raise pytest.UsageError(f"--{name.replace('_', '-')} must be 0 or more")
    state = resume.load(Path(state_path)) if state_path else None
    config.pluginmanager.register(HangWatch(config, report_dir, state), "hang-watch-session")


class HangWatch:
    def __init__(self, config: pytest.Config, report_dir: Path, state: resume.State | None):
        self.config = config
        self.report_dir = report_dir.resolve()
        self.quiescent_s = float(config.getoption("hang_quiescent"))
        self.timeout_s = float(config.getoption("hang_timeout"))
        self.resumed = state
        self.worker = "PYTEST_XDIST_WORKER" in os.environ or hasattr(config, "workerinput")
        self.ctl = Control()
        self.record = resume.State(hung=list(state.hung) if state else [])
        self.session_start = time.time()
        self.started = False
        self.out_fd = -1
        self.location: tuple[str, int | None, str] = ("", None, "")
        self.test_started = 0.0
        self.session: pytest.Session | None = None
        self.previous: object | None = None
        # what a resume by exec starts again from: a hung test may have moved both
        self.env = dict(os.environ)
        self.cwd = config.invocation_params.dir
        self.resume_path: Path | None = None
        # the real stdin/stdout/stderr: restored before an exec (a capture may hold 1, 2)
        self.std: list[int] = []
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                self.std.append(os.dup(fd))

    # ------------------------------------------------------------------ the watcher

    def _start(self) -> None:
        if self.started:
            return
        self.started = True
        to_watcher_r, to_watcher_w = os.pipe()
        from_watcher_r, from_watcher_w = os.pipe()
        self.out_fd = to_watcher_w
        self.previous = install_handler(self.ctl)
        listener = Listener(
            self.ctl,
            from_watcher_r,
            to_watcher_w,
            self.previous is not None,
            self._stuck,
            self._act,
            self._note,
            _allow_tracer,
        )
        listener.start()
        listener.ready.wait(2.0)
        channel.send(self.out_fd, {"t": "hello", "ignore": [listener.tid]})
        cmd = [
            sys.executable,
            "-m",
            "harness.pytest_plugin.watcher",
            f"--pid={os.getpid()}",
            f"--in={to_watcher_r}",
            f"--out={from_watcher_w}",
            f"--quiescent={self.quiescent_s}",
            f"--timeout={self.timeout_s}",
            f"--report-dir={self.report_dir}",
            f"--argv={json.dumps(list(sys.orig_argv))}",
        ]
        env = dict(os.environ)
        # the watcher imports the harness this plugin came from, installed or not
        root = str(Path(harness.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        payload = json.dumps({"cmd": cmd, "fds": [to_watcher_r, from_watcher_w]})
        try:
            launcher = subprocess.Popen(
                [sys.executable, "-c", _LAUNCHER, payload],
                pass_fds=(to_watcher_r, from_watcher_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            launcher.wait(LAUNCH_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._note(f"hang-watch: the watcher did not start ({exc}); tests are not watched")
        finally:
            os.close(to_watcher_r)
            os.close(from_watcher_w)

    def _phase(self, item: pytest.Item, when: str) -> None:
        ctl = self.ctl
        ctl.seq += 1
        ctl.nodeid, ctl.when = item.nodeid, when
        ctl.boot = procstart.now()
        if when == "setup":
            self.test_started = time.time()
        message = {"t": "phase", "seq": ctl.seq, "nodeid": item.nodeid, "when": when}
        message.update(
            epoch=time.time(),
            boot=ctl.boot,
            ignore=threads.timer_threads(),
            foreign=threads.foreign_threads(),
        )
        channel.send(self.out_fd, message)

    def _idle(self) -> None:
        self.ctl.seq += 1
        self.ctl.when = "idle"
        channel.send(self.out_fd, {"t": "idle", "seq": self.ctl.seq})

    # ---------------------------------------------------- a main thread that cannot be woken

    def _stuck(self, hang: channel.Hang) -> str:
        """How to go on (at once: the watcher waits for the answer a bounded time)."""
        if self.worker:
            return channel.EXIT
        why = resume.resumable()
        if why is not None:
            self._note(f"hang-watch: cannot start pytest again ({why}): the session ends")
            return channel.EXIT
        return channel.EXEC

    def _save(self, hang: channel.Hang) -> Path | None:
        """The session so far and the hung test's failure, for the resumed session."""
        path = self.report_dir / channel.HIDDEN_DIR / f"resume-{os.getpid()}.json"
        try:
            for report in resume.hung_reports(hang, self.location, self.test_started):
                self.record.add(self.config, report)
            self.record.hung.append(hang.to_json())
            self.record.save(path)
        except Exception as exc:  # a report that will not serialize, a full disk
            self._note(f"hang-watch: the session's results could not be saved ({exc!r})")
            return None
        return path

    def _act(self, hang: channel.Hang, how: str) -> None:
        for target, saved in enumerate(self.std):
            with contextlib.suppress(OSError):
                os.dup2(saved, target)
        path = self._save(hang) if how == channel.EXEC else None
        if path is not None:
            self._note(
                f"{hang.message}\nhang-watch: the main thread is stuck in native code: pytest "
                "starts again in this process and goes on with the tests not run yet"
            )
            # from where it was started, with its environment: not the hung test's
            env = {**self.env, resume.ENV: str(path)}
            with contextlib.suppress(OSError):
                os.chdir(self.cwd)
                os.execve(sys.executable, resume.argv_again(), env)
        if not self.worker:
            self._note(f"{hang.message}\nhang-watch: the main thread is stuck: pytest ends")
        os.kill(os.getpid(), signal.SIGKILL)

    def _note(self, text: str) -> None:
        fd = self.std[2] if len(self.std) > 2 else 2
        with contextlib.suppress(OSError):
            os.write(fd, f"\n{text}\n".encode(errors="replace"))

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [
            f"hang-watch: quiescent {self.quiescent_s:g}s, timeout {self.timeout_s:g}s, "
            f"reports in {self.report_dir}"
        ]
        for data in self.resumed.hung if self.resumed else []:
            hang = channel.Hang.from_json(data)
            if hang is not None:
                lines.append(
                    f"hang-watch: resumed after {hang.nodeid} hung in native code "
                    f"(report {hang.report}); the tests before it are replayed"
                )
        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self._start()
        self.location = item.location
        if self.resumed is not None:
            if resume.replay(self.config, item.nodeid, self.resumed):
                return True
            resume.replay_rest(self.config, self.resumed)
            self.resumed = None
        return None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self._phase(item, "setup")
        try:
            return (yield)
        finally:
            self._idle()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        self._phase(item, "call")
        try:
            return (yield)
        finally:
            self._idle()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        self._phase(item, "teardown")
        try:
            return (yield)
        finally:
            self._idle()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.started and not self.worker:
            self.record.add(self.config, report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a worker ended itself on a hang; its verdict file says why."""
        hang = channel.read_verdict(self.report_dir, crashitem, self.session_start)
        if hang is not None:
            report.longrepr = f"{report.longrepr}\n{hang.message}"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.out_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.out_fd)  # the watcher reads the end of file and exits
            self.out_fd = -1
        if self.previous is not None:
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signal.SIGUSR2, self.previous)  # type: ignore[arg-type]
        if self.started and self.ctl.hangs > 0:
            # read now: a later sessionfinish hook may have changed it
            status = int(self.session.exitstatus) if self.session is not None else 1
            threads.end_if_threads_left(self.ctl.left, status, JOIN_LEFT_S, self._note)


def _check_report_dir(path: Path) -> None:
    """A folder that cannot take a report is refused now, in one line (the harness's own
    check, `report.store.check_report_dir`, costs its imports in every pytest start; the
    watcher runs it again before each report)."""
    try:
        (path / channel.HIDDEN_DIR).mkdir(parents=True, exist_ok=True)
        probe = path / channel.HIDDEN_DIR / f".probe-{os.getpid()}"
        probe.write_bytes(b"probe\n")
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(
            f"--hang-report-dir {path}: cannot hold a report ({exc.strerror or exc})"
        ) from None


def _allow_tracer(pid: int) -> None:
    """Under yama ptrace_scope=1 only an ancestor may trace: the watcher is none (it is
    started outside pytest's tree), so allow it and its stack tools. Best effort: without
    yama the call fails and nothing is needed."""
    if pid <= 0:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PTRACER, pid, 0, 0, 0)
