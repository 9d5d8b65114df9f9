"""`pytest --hang-watch`: the options and the hooks (inert without the flag).

In each process that runs tests (pytest alone, or each xdist worker; the controller runs
none) a watcher is started at the session's start, outside pytest's tree, and each test
phase is written in memory it shares (`phasemem`). A hang it finds fails that test
(`listener`); the xdist controller adds the verdict to the report of a worker that ended
itself (`pytest_handlecrashitem`); a session started again after a hang in native code
replays what ran before (`resume`, `restart`). Whatever a test does to the process, the
plugin calls only what it took at import (`pinned`), and a failure of its own is said in
the summary (`notes`), never the session's."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin import channel, procstart, resume, threads
from harness.pytest_plugin.launch import allow_tracer, check_report_dir, start_watcher
from harness.pytest_plugin.listener import SIGNAL, Control, Listener, OwnStall, install_handler
from harness.pytest_plugin.notes import Notes
from harness.pytest_plugin.phasemem import PhaseMemory, PhaseState
from harness.pytest_plugin.pinned import P, kill_pending, write_all
from harness.pytest_plugin.restart import ExecBlock

DEFAULT_QUIESCENT_S = 5.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_REPORT_DIR = "harness-reports"
READY_WAIT_S = 10.0  # the first test waits this long for the watcher to be ready
JOIN_LEFT_S = 1.0  # at the end, how long threads a hung test left get to finish
DYING_WAIT_MS = 2000  # a watcher killed but not yet dead: it ends as soon as it runs
FAULT_ENV = "HANG_WATCH_FAULT"  # a fault of the plugin's own, for its tests (`_inject`)


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
    check_report_dir(report_dir)
    for name in ("hang_quiescent", "hang_timeout"):
        if float(config.getoption(name)) < 0:
            raise pytest.UsageError(f"--{name.replace('_', '-')} must be 0 or more")
    state = resume.load(Path(state_path)) if state_path else None
    watch = HangWatch(config, report_dir, state)
    config.pluginmanager.register(watch, "hang-watch-session")
    config.pluginmanager.register(watch.notes, "hang-watch-notes")


class HangWatch:
    def __init__(self, config: pytest.Config, report_dir: Path, state: resume.State | None):
        self.config = config
        self.report_dir = report_dir.resolve()
        self.quiescent_s = float(config.getoption("hang_quiescent"))
        self.timeout_s = float(config.getoption("hang_timeout"))
        self.resumed = state
        self.worker = "PYTEST_XDIST_WORKER" in os.environ or hasattr(config, "workerinput")
        self.fault = os.environ.get(FAULT_ENV, "")
        self.pid = P.getpid()  # a forked child (pytest-forked, a test's fork) is not us
        self.ctl = Control()
        self.session_start = P.time()
        self.started = False
        self.link: channel.Link | None = None
        self.mem: PhaseMemory | None = None
        self.listener: Listener | None = None
        self.journal: resume.Journal | None = None
        self.block: ExecBlock | None = None
        self.test_boot = 0.0
        self.session: pytest.Session | None = None
        self.previous: object | None = None
        self.watcher_fd = -1
        self.waited = False
        self.notes = Notes(config)
        # what a resume by exec starts again from: a hung test may have moved both
        self.env = dict(os.environ)
        self.cwd = str(config.invocation_params.dir)
        # the real stdin/stdout/stderr: restored before an exec (a capture may hold 1, 2)
        self.std: list[int] = []
        for fd in (0, 1, 2):
            try:
                self.std.append(P.dup(fd))
            except OSError:
                break

    def _ours(self) -> bool:
        """This is the session's process, hang-watch still on (not a forked child)."""
        return self.started and not self.ctl.off and P.getpid() == self.pid

    # ------------------------------------------------------------------ the watcher

    def _start(self) -> None:
        self.started = True
        ctl = self.ctl
        try:
            self.link, theirs = channel.Link.pair()
            self.mem = PhaseMemory.create()
        except OSError as exc:
            self._warn(f"hang-watch: no channel to a watcher ({exc}); tests are not watched")
            ctl.off = "no channel"
            return
        self.previous = install_handler(ctl)
        if self.previous is None:
            self._warn(
                "hang-watch: its signal handler could not be installed: a hang is "
                "not interrupted, pytest starts again instead"
            )
        self.listener = Listener(ctl, self.link, self._stuck, self._act, self._warn, self._ready)
        self.listener.start()
        self.listener.ready.wait(2.0)
        hidden = self.report_dir / channel.HIDDEN_DIR
        # the journal serves a resume only: an xdist worker ends instead, and pytest.main()
        # inside another program cannot be started again
        if not self.worker and resume.resumable() is None:
            try:
                name = f"journal-{self.pid}-{int(P.time() * 1000)}.jsonl"
                self.journal = resume.Journal(hidden / name)
            except OSError as exc:
                self._warn(
                    f"hang-watch: no journal of the session ({exc}): a test stuck "
                    "in native code ends the session instead of resuming it"
                )
        if self.journal is not None:
            env = {**self.env, resume.ENV: str(self.journal.path)}
            self.block = ExecBlock(resume.argv_again(), env, self.cwd, self.std)
        self.link.send(
            {
                "t": "hello",
                "ignore": [self.listener.tid],
                "worker": self.worker,
                "journal": str(self.journal.path) if self.journal else "",
                "exec": self.block.addresses() if self.block else None,
            }
        )
        args = [
            f"--pid={self.pid}",
            f"--sock={theirs.fileno()}",
            f"--shm={self.mem.fd}",
            f"--quiescent={self.quiescent_s}",
            f"--timeout={self.timeout_s}",
            f"--report-dir={self.report_dir}",
            f"--argv={P.dumps(resume.argv_again())}",
        ]
        why = start_watcher(args, [theirs.fileno(), self.mem.fd], self.env)
        theirs.close()
        if why is not None:
            ctl.off = why
            self._warn(f"hang-watch: the watcher did not start ({why}); tests are not watched")

    def _ready(self, pid: int) -> None:
        allow_tracer(pid)
        with contextlib.suppress(OSError):
            self.watcher_fd = P.pidfd_open(pid)  # to end it safely, should it stall

    def _phase(self, item: pytest.Item, when: str) -> None:
        if not self._ours() or self.mem is None:
            return
        try:
            ctl = self.ctl
            ctl.seq += 1
            ctl.nodeid, ctl.when = item.nodeid, when
            ctl.boot = procstart.now()
            if when == "setup":
                self.test_boot = ctl.boot
            infra = (tuple(threads.timer_threads()), tuple(threads.foreign_threads()))
            now = (ctl.boot, P.time(), self.test_boot)
            self.mem.write(PhaseState(ctl.seq, when, item.nodeid, *now, *infra))
            self._inject(item, when)
        except OwnStall:
            self._own_stall()
        except Exception as exc:  # a bug of the plugin's must not be the test's failure
            self._off(f"its phase hook failed ({exc!r})")

    def _idle(self) -> None:
        if not self._ours() or self.mem is None:
            return
        try:
            self.ctl.seq += 1
            self.ctl.when = "idle"
            self.mem.write(PhaseState(seq=self.ctl.seq, test_boot=self.test_boot))
        except OwnStall:
            self._own_stall()
        except Exception as exc:
            self._off(f"its phase hook failed ({exc!r})")

    def _inject(self, item: pytest.Item, when: str) -> None:
        """HANG_WATCH_FAULT=phase-deadlock:TEXT: the plugin's own code deadlocks (a lock
        taken twice) at the call of a test whose node id holds TEXT. The test of the
        plugin's own-fault path (tests/test_pytest_plugin_hostile.py): a real hang in the
        plugin's frames, which no test can cause any more."""
        kind, _, text = self.fault.partition(":")
        if kind == "phase-deadlock" and when == "call" and text and text in item.nodeid:
            lock = P.allocate_lock()
            lock.acquire()
            lock.acquire()  # interrupted by the watcher's verdict (OwnStall)

    def _own_stall(self) -> None:
        hang = self.ctl.own
        where = f"{hang.when} of {hang.nodeid} (report {hang.report})" if hang else "a test"
        self._off(f"its own code hung in {where}: hang-watch's fault, not the test's")

    def _off(self, why: str) -> None:
        """Hang-watch stops for the rest of the session, saying why once; the watcher is
        told (an idle phase, then "off": it exits)."""
        if self.ctl.off:
            return
        self.ctl.off = why
        self._warn(f"hang-watch: {why}; the tests after it were not watched")
        with contextlib.suppress(Exception):
            if self.mem is not None:
                self.mem.write(PhaseState(seq=self.ctl.seq + 1, test_boot=self.test_boot))
            if self.link is not None:
                self.link.send({"t": "off"}, timeout=0)

    # ---------------------------------------------------- a main thread that cannot be woken

    def _stuck(self, hang: channel.Hang) -> str:
        """How to go on (at once: the watcher waits for the answer a bounded time)."""
        if self.worker:
            return channel.EXIT
        why = resume.resumable()
        if why is None and self.block is None:
            why = "no journal of the session"
        if why is None and self.journal is not None and self.journal.broken:
            why = f"the journal of the session is incomplete: {self.journal.broken}"
        if why is not None:
            self._say(f"hang-watch: cannot start pytest again ({why}): the session ends")
            return channel.EXIT
        return channel.EXEC

    def _act(self, hang: channel.Hang, how: str) -> None:
        if how == channel.EXEC and self.journal is not None and self.block is not None:
            self.journal.add_hung(hang)
            self._say(
                f"{hang.message}\nhang-watch: the main thread is stuck in native code: pytest "
                "starts again in this process and goes on with the tests not run yet"
            )
            self.block.exec_now()
        if not self.worker:
            self._say(f"{hang.message}\nhang-watch: the main thread is stuck: pytest ends")
        P.kill(P.getpid(), signal.SIGKILL)

    def _say(self, text: str) -> None:
        """At once, on the terminal's stderr (a hang's news)."""
        fd = self.std[2] if len(self.std) > 2 else 2
        write_all(fd, f"\n{text}\n".encode(errors="replace"))

    def _warn(self, text: str) -> None:
        """The plugin's own failure: once, in the terminal summary."""
        self.notes.add(text)

    # ------------------------------------------------------------------ hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [
            f"hang-watch: quiescent {self.quiescent_s:g}s, timeout {self.timeout_s:g}s, "
            f"reports in {self.report_dir}"
        ]
        return lines + (resume.header(self.resumed) if self.resumed else [])

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # before collection and any test: nothing a test does is in place yet; the xdist
        # controller runs no test
        if not self.config.pluginmanager.has_plugin("dsession"):
            self._start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        if self.listener is not None and not self.waited:
            # the watcher starts during collection; the first test waits for it (bounded),
            # so that every test is watched from its start
            self.waited = True
            self.listener.watching.wait(READY_WAIT_S)
        if self.resumed is not None and P.getpid() == self.pid:
            if resume.replay(self.config, item.nodeid, self.resumed, item.location):
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
        if self.journal is not None and P.getpid() == self.pid:
            try:
                self.journal.add(self.config, report)
            except Exception as exc:  # a report that will not serialize
                self.journal.broken = f"a report could not be saved ({exc!r})"
            if self.journal.broken and not self.ctl.journal_said:
                self.ctl.journal_said = True
                self._warn(
                    f"hang-watch: the session's journal stopped ({self.journal.broken}): "
                    "a test stuck in native code would end the session"
                )

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a worker ended itself on a hang; its verdict file says why."""
        hang = channel.read_verdict(self.report_dir, crashitem, self.session_start)
        if hang is not None:
            report.longrepr = f"{report.longrepr}\n{hang.message}"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.session = session
        if self._ours() and self.watcher_fd >= 0:
            # a watcher that died in the last tests: the listener may not have seen it yet
            exited = P.poll()
            exited.register(self.watcher_fd, select.POLLIN)
            # killed in the last test but not dead yet: it dies as soon as it runs
            # (the watcher's fd is opened once the listener has its pid)
            pid = self.listener.watcher_pid if self.listener is not None else 0
            wait_ms = DYING_WAIT_MS if kill_pending(pid) else 0
            with contextlib.suppress(OSError):
                if exited.poll(wait_ms):
                    self._off("the watcher ended or its socket was closed")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if P.getpid() != self.pid:
            return  # a forked child that ran on: the session's watcher is not its own
        if self.listener is not None:
            self.listener.closing = True
        if self.link is not None:
            self.link.close()  # the watcher sees the end of the socket and exits
        if self.watcher_fd >= 0:
            if self.ctl.off:
                # a watcher that stalled would not read the end: it is the plugin's to end
                with contextlib.suppress(OSError):
                    P.pidfd_send_signal(self.watcher_fd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                P.close(self.watcher_fd)
        if self.previous is not None:
            with contextlib.suppress(ValueError, TypeError, OSError):
                P.signal(SIGNAL, self.previous)  # type: ignore[arg-type]
        if self.journal is not None:
            self.journal.close(remove=True)
        if self.started and self.ctl.hangs > 0:
            # read now: a later sessionfinish hook may have changed it
            status = int(self.session.exitstatus) if self.session is not None else 1
            threads.end_if_threads_left(self.ctl.left, status, JOIN_LEFT_S, self._say)
