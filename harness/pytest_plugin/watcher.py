"""The watcher: `python -m harness.pytest_plugin.watcher --pid PID --sock FD --shm FD …`, a
process outside pytest's tree (its launcher has exited) that follows pytest's tree with an
`Observer` and the test phase the plugin writes in shared memory (`phasemem`). While a
phase runs, a tree quiescent for --quiescent seconds, or a test past --timeout, is diagnosed
into a report folder; the verdict goes to the plugin over the socket, whose answer says how
the test was failed; then the processes the hung test left are killed (those born in the
hung phase when the test was interrupted; every descendant when pytest starts again or
ends). With no answer at all (nothing of Python runs in pytest: the GIL is held), pytest
is made to start again through gdb (`restart.traced_exec`) with the verdict in its
journal; an xdist worker, or a pytest that cannot be started again, is ended. It beats
every BEAT_S, so that the plugin can tell a stalled watcher.

The watcher may sit in pytest's tree (pytest a child subreaper adopts it once its launcher
exits): it leaves itself and its own children (the stack tools) out of every list of
processes to kill. Birth times are compared on the clock since boot (`procstart`), the
plugin's phase starts too. A test is failed by --timeout once.

It never outlives pytest: it ends when the plugin's socket closes (pytest exited or started
again: the socket is close-on-exec), when the plugin says "off", or when the pid is gone.
Every wait has a bound."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import shutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.errors import HarnessError
from harness.execute.attach import ptrace_refusal
from harness.execute.runner import SampleOptions
from harness.pytest_plugin import channel, procstart
from harness.pytest_plugin.observe import PluginObserver
from harness.pytest_plugin.phasemem import PhaseMemory
from harness.pytest_plugin.restart import append_hung, traced_exec
from harness.vocab import RunMode, RunStatus, Stage, Trigger
from harness.watch.housekeeping import MAX_GAP_S
from harness.watch.watchloop import WATCH_INTERVAL_S

POLL_S = 0.1  # the loop's step (messages, the phase); the tree is looked at every `look_every`
ANSWER_S = 6.0  # the plugin answers within its 2 s interrupt wait plus the cleanup
BEAT_S = 2.0  # the plugin takes 10 s of silence for a stall (listener.STALL_S)
MAX_TEXT = 4000  # a verdict's texts, cut to fit one message


@dataclass
class Phase:
    seq: int = 0
    nodeid: str = ""
    when: str = "idle"
    boot: float = 0.0  # the phase's start, seconds since boot (the clock of /proc)
    test_boot: float = 0.0  # the test's setup, the same clock


def look_every(quiescent_s: float) -> float:
    """Seconds between looks at the test process's tree: a fifth of the quiescence window,
    at least the watch loop's 0.25 s. A whole test session is watched, every thread of every
    process a test starts (a browser's, torch's), for as long as the suite runs: at 1 s for
    the default 5 s window the watcher costs a quarter of what it did at 0.25 s (this
    project's suite: about 190 CPU-s for six watchers at 0.5 s), and a hang still has five
    looks to be judged quiescent in, a second later at most. Never more than half the
    housekeeping rule's longest gap between looks (watch/housekeeping.py MAX_GAP_S): a
    longer step would end every span, and a hung test with a heartbeat thread would never
    be quiescent. At 1 s a housekeeping thread is excused after its 8 looks, 7 s."""
    return max(WATCH_INTERVAL_S, min(quiescent_s / 5, MAX_GAP_S / 2))


class Watcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.pid: int = args.pid
        self.link = channel.Link.from_fd(args.sock)
        self.mem = PhaseMemory(args.shm)
        self.timeout_s: float = args.timeout
        self.report_dir = Path(args.report_dir)
        self.argv: list[str] = json.loads(args.argv)
        self.obs = PluginObserver(self.pid, args.quiescent, interval_s=look_every(args.quiescent))
        self.msgs: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.phase = Phase()
        self.eof = False
        self.off = False  # the plugin said "off" (it lives on, unwatched)
        self.hello: dict[str, Any] = {}
        self.base_ignore: set[tuple[int, int]] = set()  # the plugin's listener
        self.phase_ignore: set[tuple[int, int]] = set()  # pytest-timeout's Timer
        self.foreign: list[int] = []  # left out while blocked (faulthandler's watchdog)
        self.timed_out: set[str] = set()  # tests already failed by --timeout
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()

    def _read(self) -> None:
        """Takes the plugin's messages at once, whatever the main loop is doing."""
        while not self.link.dead:
            for msg in self.link.recv(1.0):
                self.msgs.put(msg)
        self.msgs.put(None)

    def _take(self, msg: dict[str, Any] | None) -> dict[str, Any] | None:
        """Apply one message; an answer is handed back to the one waiting for it."""
        if msg is None or msg.get("t") == "off":
            self.eof = True  # pytest ended, started again, or turned hang-watch off
            self.off = self.off or msg is not None
            return None
        what = msg.get("t")
        if what == "hello":
            self.hello = msg
            self.base_ignore = {(self.pid, int(tid)) for tid in msg.get("ignore", [])}
        elif what == "answer":
            return msg
        return None

    def _drain(self, wait_s: float) -> dict[str, Any] | None:
        end = time.monotonic() + wait_s
        answer: dict[str, Any] | None = None
        while True:
            left = end - time.monotonic()
            try:
                msg = self.msgs.get(timeout=max(0.0, left)) if left > 0 else self.msgs.get_nowait()
            except queue.Empty:
                return answer
            answer = self._take(msg) or answer
            # after "off" the plugin is alive: the answer it owes may still come
            if answer is not None or (self.eof and not self.off):
                return answer

    def _follow(self) -> None:
        """The phase in shared memory: a new `seq` is a new phase (the rule starts over)."""
        state = self.mem.read()
        if state is None or state.seq == self.phase.seq:
            return
        self.phase = Phase(state.seq, state.nodeid, state.when, state.boot, state.test_boot)
        self.phase_ignore = {(self.pid, t) for t in state.timer}
        self.foreign = list(state.foreign)
        self.obs.reset()

    def run(self) -> int:
        self.link.send({"t": "ready", "pid": os.getpid()})
        beat = time.monotonic()
        try:
            while True:
                self._drain(POLL_S)
                if self.eof or self.obs.gone:
                    return 0
                self._follow()
                now = time.monotonic()
                if now - beat >= BEAT_S:
                    beat = now
                    self.link.send({"t": "beat"}, timeout=0)
                self._ignore()
                self.obs.look(now)
                phase = self.phase
                if phase.when not in channel.PHASES:
                    continue
                if self.obs.quiescent(now):
                    self._trigger(Trigger.QUIESCENT, phase)
                elif (
                    self.timeout_s > 0
                    and phase.nodeid not in self.timed_out
                    and procstart.now() - phase.test_boot >= self.timeout_s
                ):
                    # once: its teardown (or the rest of its call) is the same test
                    self.timed_out.add(phase.nodeid)
                    self._trigger(Trigger.WALL, phase)
                if self.eof:
                    return 0
        finally:
            self.obs.close()

    def _ignore(self) -> None:
        """The threads left out of the rule for this look (in place: the loop holds the
        set)."""
        ignore = self.obs.ignore
        ignore.clear()
        ignore |= self.base_ignore | self.phase_ignore
        ignore |= {(self.pid, t) for t in self.foreign if procstart.blocked(self.pid, t)}

    def _trigger(self, trigger: Trigger, phase: Phase) -> None:
        # imported at the first hang, not at the start: most sessions never hang, and a
        # watcher starts in every pytest and xdist worker
        from harness.pipeline.attach import diagnose_tree, start_report
        from harness.pipeline.run import finishing
        from harness.report import store

        after = procstart.now() - (phase.boot if trigger is Trigger.QUIESCENT else phase.test_boot)
        if trigger is Trigger.QUIESCENT:
            reason = f"every thread of pytest's tree blocked on the tree in {phase.when}"
        else:
            reason = f"{phase.nodeid} ran past --hang-timeout {self.timeout_s:g}s"
        label = "pytest-" + phase.nodeid.rsplit("/", 1)[-1].replace("::", "-")
        self.link.send({"t": "busy"}, timeout=0)  # the plugin allows a diagnosis longer
        try:
            report = start_report(
                self.report_dir, label, RunMode.PYTEST, self.argv, psutil.Process(self.pid)
            )
        except (psutil.Error, HarnessError) as exc:
            print(f"hang-watch: no report for {phase.nodeid}: {exc}", file=sys.stderr)
            return
        report.notes.append(f"test {phase.nodeid}, phase {phase.when}")
        # asked now: the plugin lets the watcher trace once it knows its pid (yama scope 1)
        refusal = ptrace_refusal(self.pid)
        with finishing(report):
            store.save(report, Stage.RUN)
            if not diagnose_tree(report, self.obs, trigger, reason, SampleOptions(), refusal):
                shutil.rmtree(report.directory, ignore_errors=True)
                return
            store.finish(report, RunStatus.COMPLETE)
        verdict = report.verdict
        assert verdict is not None
        top = verdict.causes[0] if verdict.causes else None
        hang = channel.Hang(
            seq=phase.seq,
            nodeid=phase.nodeid,
            when=phase.when,
            trigger=trigger,
            after_s=after,
            kind=str(verdict.kind),
            summary=verdict.summary[:MAX_TEXT],
            cause_id=top.id if top else "",
            cause_title=top.sentence[:MAX_TEXT] if top else "",
            report=str(report.directory),
            time=time.time(),
        )
        channel.write_verdict(self.report_dir, hang)
        born = self._born_since(phase.boot)  # before the answer: the tree is still whole
        answered = self.link.send({"t": "hang", **hang.to_json()})
        answer = self._drain(ANSWER_S) if answered else None
        how = str(answer.get("how", "")) if answer else channel.KILLED
        if answer is None and self.off:
            how = channel.MOVED  # the plugin turned itself off meanwhile: it is not stuck
        if how == channel.INTERRUPTED:
            victims = born + self._born_since(phase.boot)
            left = self.obs.leave_out_threads_since(self.pid, phase.boot)
            if left:
                print(f"{hang.nodeid}: threads left behind {left}", file=sys.stderr)
        elif how in (channel.MOVED, channel.OWN):
            victims = []  # OWN: the plugin's fault, and it is off now: nothing to end
        else:  # pytest starts again or ends: nothing of this incarnation may stay
            victims = self._born_since(-1.0)
        print(f"{hang.nodeid}: answer {how}, killing {[p.pid for p in victims]}", file=sys.stderr)
        killed = _kill(victims)
        if how == channel.KILLED:  # no answer: the GIL is held, or pytest is gone
            how = self._no_answer(hang)
            if how == channel.KILLED:
                killed += _kill(_procs([self.pid]))
        done = dataclasses.replace(hang, answer=how, killed=killed)
        channel.write_verdict(self.report_dir, done)
        self.link.send({"t": "cleaned", "seq": phase.seq, "killed": killed})
        if how in (channel.OWN, channel.EXEC_TRACED):
            self.eof = True  # hang-watch is off; or a new watcher follows the new image
        self.obs.reset()

    def _no_answer(self, hang: channel.Hang) -> str:
        """Nothing of Python runs in pytest (its main thread holds the GIL in native code):
        a worker is ended (xdist replaces it); pytest itself is made to start again through
        gdb, with the verdict in its journal. Only where that cannot be done does it end."""
        block = self.hello.get("exec")
        journal = str(self.hello.get("journal") or "")
        if self.hello.get("worker") or not isinstance(block, dict) or not journal:
            return channel.KILLED
        traced = dataclasses.replace(hang, answer=channel.EXEC_TRACED)
        if not append_hung(Path(journal), traced):
            print(f"{hang.nodeid}: the journal {journal} cannot take the verdict", file=sys.stderr)
            return channel.KILLED
        why = traced_exec(self.pid, block, journal)
        if why is not None:
            print(f"{hang.nodeid}: {why}: pytest is ended", file=sys.stderr)
            return channel.KILLED
        return channel.EXEC_TRACED

    def _born_since(self, boot: float) -> list[psutil.Process]:
        """pytest's descendants born at or after `boot` (seconds since boot), the watcher
        and its own children left out."""
        pids = [
            p
            for p in descendants(self.pid, os.getpid())
            if procstart.born_since(procstart.process_started(p), boot)
        ]
        return _procs(pids)


def descendants(root: int, skip: int) -> list[int]:
    """Every descendant of `root` but `skip` and its own descendants (one read of the
    process table: a parent's map)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            fields = procstart.stat_fields(f"/proc/{name}/stat") if name.isdigit() else None
            if fields and len(fields) > 1 and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child != skip and child != root and child not in out:
                out.append(child)
                stack.append(child)
    return out


def _procs(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            out.append(psutil.Process(pid))
    return out


def _kill(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL each, once (psutil checks the pid still names the same process)."""
    killed: list[int] = []
    for p in procs:
        if p.pid in killed:
            continue
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGKILL)
            killed.append(p.pid)
    return killed


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m harness.pytest_plugin.watcher")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--sock", type=int, required=True)
    ap.add_argument("--shm", type=int, required=True)
    ap.add_argument("--quiescent", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--report-dir", required=True)
    ap.add_argument("--argv", default="[]")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # the watcher must never die of the terminal's ^C before pytest has been told
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # its own log (stderr is /dev/null: pytest's terminal is not ours to write), kept only
    # when something was said
    log = Path(args.report_dir) / channel.HIDDEN_DIR / f"watcher-{args.pid}-{os.getpid()}.log"
    with contextlib.suppress(OSError):
        sys.stderr = open(log, "a", buffering=1)  # noqa: SIM115 (for the process's life)
    try:
        return Watcher(args).run()
    except Exception:  # a bug here must not leave pytest unwatched in silence
        traceback.print_exc()
        return 1
    finally:
        with contextlib.suppress(OSError):
            if log.stat().st_size == 0:
                log.unlink()


if __name__ == "__main__":
    sys.exit(main())
