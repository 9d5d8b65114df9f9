"""The reaper: nothing the trainer starts outlives the harness, not even a SIGKILLed harness.

`proctree.kill_tree` cleans up on every exit path the harness itself runs (a verdict, an
exception, SIGINT/SIGTERM/SIGHUP). It cannot run when the harness is SIGKILLed (an OOM kill,
`kill -9`, a CI step timeout that signals the harness's pid): the trainer, its children and
anything that left its session were then re-parented to init and lived on, holding the GPU.

So `run_watched` starts this small process BEFORE the trainer. It runs `serve`: it holds the
read end of a pipe whose write end only the harness holds, is told the trainer's pid ("watch
PID"), and scans /proc every `POLL_S` seconds (backing off to `IDLE_POLL_S` while the tree
does not grow; less often on a host with thousands of processes: a scan takes at most 5% of
a core) to record, by pid AND start time (field 22 of
/proc/PID/stat), every process that belongs to the trainer: the trainer, any process whose
parent is recorded (so a grandchild that called setsid is known while its parent lives, and
stays known after), and every member of a recorded session (so an orphan whose parent died
is still known by its session). The trainer's environment also carries a random per-run
cookie (COOKIE_VAR), inherited by every descendant that keeps its environment. When the pipe
closes without "done" (the harness died, however), it kills them all: SIGSTOP to every
recorded live process and every process started since the trainer that carries the cookie
(an escapee no scan saw), rescanning until the set stops growing (a stopped process forks no
more, so no child escapes between scan and kill), then SIGKILL to each (through a pidfd
opened after checking the start time: a recycled pid is never signalled) and to the process
group of each recorded session, rescanning until nothing recorded is alive. It writes one
line to stderr and exits 0. After "done" (the harness killed and reaped the tree itself) it
exits without killing anything; after "kill" it kills the tree the same way, silently, and
exits: how a build ends (`tools.run_tool(..., reaped=True)`: the build command runs like the
trainer, under its own reaper, with PR_SET_PDEATHSIG and the cookie).

The reaper is its own process in its own session (`start_new_session`), so a SIGKILL of the
harness's process group does not take it along; it imports only the standard library and
starts as `python -I -S reaper.py` (no site, no harness package import): about 30 ms.

The trainer is also started through `exec` below, which sets PR_SET_PDEATHSIG(SIGKILL) before
exec'ing the command: the kernel SIGKILLs the trainer itself the moment the harness thread
that started it dies, even if the reaper is gone too. It covers only that one process (the
setting is not inherited by its children; the reaper covers them) and is cleared when the
trainer execs a set-user-ID or file-capability binary.

Limits (also in docs/architecture.md, "Nothing outlives the harness"):
- a process that left the trainer's session, whose ancestors all died before any scan saw
  it (within one poll interval: `POLL_S`, up to `IDLE_POLL_S` once the tree has not grown
  for a few scans) AND that dropped the cookie from its environment
  (`env -i`, sudo, a daemon that scrubs it) is not killed, nor what it started;
- a process in uninterruptible sleep (D state) dies only when its I/O ends;
- a SIGKILL of the reaper itself (by pid, or of its own session) ends the protection: the
  trainer still dies by PR_SET_PDEATHSIG when the harness does, its descendants do not;
- a CI runner that kills the whole cgroup kills everything anyway, reaper included.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the harness side only: the reaper process never imports these
    import subprocess
    from collections.abc import Sequence

POLL_S = 0.2  # how often the reaper rescans /proc while the harness lives and the tree grows
# ... and at most how seldom, once the tree has stopped growing: each scan that finds no new
# process doubles the interval up to this; a birth brings it back to POLL_S. A long run's
# tree is mostly settled, and every harness run (and build) has a reaper scanning all of
# /proc: on a busy host (a test suite's hundreds of processes) that was most of its cost
IDLE_POLL_S = 1.0
READY_TIMEOUT_S = 10.0  # how long the harness waits for the reaper to start
KILL_DEADLINE_S = 5.0  # how long the reaper keeps rescanning and killing after the harness died
_PR_SET_PDEATHSIG = 1
COOKIE_VAR = "HARNESS_REAPER_COOKIE"  # set in the trainer's environment: see `new_cookie`

# (state, ppid, session id, start time in clock ticks since boot)
Stat = tuple[str, int, int, int]


def read_stat(pid: int) -> Stat | None:
    """Parse /proc/PID/stat; None when the process is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # os.open: twice as fast as open()
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 2 :].split()  # comm may hold spaces and parens
    except (OSError, ValueError):
        return None
    # fields[0] is field 3 of proc(5): state, ppid, pgrp, session, ..., starttime (field 22)
    return fields[0].decode(), int(fields[1]), int(fields[3]), int(fields[19])


def snapshot() -> dict[int, Stat]:
    procs: dict[int, Stat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = read_stat(int(name))
            if st is not None:
                procs[int(name)] = st
    return procs


class Tracker:
    """Everything that belongs to the trainer `root`, by pid and start time."""

    def __init__(self, root: int, cookie: str = "") -> None:
        self.root = root
        self.known: dict[int, int] = {}  # pid -> start time
        self.sessions: set[int] = set()  # sessions led by a recorded process
        self.me = os.getpid()
        # COOKIE_VAR=cookie in the trainer's environment, inherited by its descendants
        self.mark = f"{COOKIE_VAR}={cookie}".encode() if cookie else b""
        st = read_stat(root)
        self.root_start = 0 if st is None else st[3]
        if st is not None:
            self._record(root, st)

    def _record(self, pid: int, st: Stat) -> None:
        self.known[pid] = st[3]
        if st[2] == pid:
            self.sessions.add(pid)

    def _ours(self, pid: int, st: Stat, procs: dict[int, Stat]) -> bool:
        if pid == self.me:
            return False
        if self.known.get(pid) == st[3]:
            return True
        if st[2] in self.sessions:
            return True
        parent = procs.get(st[1])
        return parent is not None and self.known.get(st[1]) == parent[3]

    def _marked(self, pid: int, st: Stat) -> bool:
        """Started after the trainer and carrying its cookie in its environment."""
        if not self.mark or st[3] < self.root_start or st[0] in "ZX" or pid == self.me:
            return False
        data = b""
        try:
            fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
            try:
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
        except OSError:  # gone, or not ours to read
            return False
        return self.mark in data.split(b"\0")

    def scan(self, deep: bool = False) -> dict[int, Stat]:
        """Record every process of the tree alive now; forget the dead ones (a recycled
        pid has another start time, so it is never mistaken for a recorded one). `deep`
        (when killing): also every process that carries the trainer's cookie, which finds
        an orphan that left the session before any scan saw it."""
        procs = snapshot()
        self.known = {p: t for p, t in self.known.items() if p in procs and procs[p][3] == t}
        # an empty session's id can be reused: only a session with live members counts
        self.sessions &= {st[2] for st in procs.values()}
        if deep:
            for pid, st in procs.items():
                if self.known.get(pid) != st[3] and self._marked(pid, st):
                    self._record(pid, st)
        grew = True
        while grew:
            grew = False
            for pid, st in procs.items():
                if self.known.get(pid) != st[3] and self._ours(pid, st, procs):
                    self._record(pid, st)
                    grew = True
        return procs

    def alive(self, procs: dict[int, Stat]) -> list[int]:
        return [p for p in self.known if p in procs and procs[p][0] not in "ZX"]

    def signal(self, pid: int, sig: int) -> bool:
        """Send `sig` to `pid` only if it is still the recorded process."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:  # pidfd_open unsupported (kernel < 5.3): check, then kill by pid
            fd = -1
        try:
            st = read_stat(pid)
            if st is None or st[3] != self.known.get(pid):
                return False
            if fd >= 0:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
            return True
        except OSError:
            return False
        finally:
            if fd >= 0:
                os.close(fd)

    def kill_all(self, deadline_s: float = KILL_DEADLINE_S) -> int:
        """Freeze the tree, kill it, rescan until nothing recorded is left; the number of
        processes killed."""
        until = time.monotonic() + deadline_s
        stopped: set[int] = set()
        for _ in range(50):  # freeze: a stopped process forks no more
            new = [p for p in self.alive(self.scan(deep=True)) if p not in stopped]
            if not new:
                break
            for pid in new:
                self.signal(pid, signal.SIGSTOP)
                stopped.add(pid)
        killed: set[int] = set()
        while True:
            procs = self.scan(deep=True)
            alive = self.alive(procs)
            if not alive or time.monotonic() > until:
                return len(killed)
            for pid in alive:
                if self.signal(pid, signal.SIGKILL):
                    killed.add(pid)
            for sid in self.sessions:  # the session leader's process group, in one call
                with contextlib.suppress(OSError):
                    os.killpg(sid, signal.SIGKILL)
            time.sleep(0.02)


def serve(ctl_fd: int, harness_pid: int) -> int:
    """The reaper process: follow the tree until "done", "kill" or until the pipe closes."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # the harness's terminal is not ours
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.write(1, b"ready\n")
    except BrokenPipeError:
        return 0  # the harness was interrupted while starting us: nothing to watch
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the harness stops reading; nothing else goes there
    os.close(devnull)
    tracker: Tracker | None = None
    interval = calm = POLL_S
    buf = b""
    while True:
        ready, _, _ = select.select([ctl_fd], [], [], interval if tracker else None)
        if ready:
            chunk = os.read(ctl_fd, 4096)
            if not chunk:  # the harness is gone without saying "done"
                if tracker is None:
                    return 0
                killed = tracker.kill_all()
                _note(
                    f"the harness (pid {harness_pid}) died; killed {killed} process(es) of "
                    f"the tree of pid {tracker.root}"
                )
                return 0
            buf += chunk
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                words = line.split()
                if words[:1] == [b"done"]:
                    return 0
                if words[:1] == [b"kill"]:  # the harness ends the tree through us (a build)
                    if tracker is not None:
                        tracker.kill_all()
                    return 0
                if words[:1] == [b"watch"] and len(words) in (2, 3):
                    cookie = words[2].decode() if len(words) == 3 else ""
                    tracker = Tracker(int(words[1]), cookie)
        if tracker is not None:
            t0 = time.monotonic()
            before = set(tracker.known)
            tracker.scan()
            # a tree that stopped growing is scanned less and less often (IDLE_POLL_S at
            # most); a new process brings the interval back to POLL_S
            calm = POLL_S if set(tracker.known) - before else min(IDLE_POLL_S, 2 * calm)
            # on a host with thousands of processes, scan less often: at most 5% of a core
            interval = max(calm, 20 * (time.monotonic() - t0))


def _note(message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"harness reaper: {message}\n".encode())


def _apply(option: str) -> None:
    """One host condition, set in this process before it execs the command, so that every
    thread and child of it inherits it (harness.execute.conditions makes the options)."""
    key, _, value = option.partition("=")
    if key == "cgroup":  # join the leaf cgroup: "0" is the writing process itself
        with open(os.path.join(value, "cgroup.procs"), "w") as procs:
            procs.write("0")
    elif key == "as":
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(value), int(value)))
    elif key == "cpus":
        cpus: set[int] = set()
        for part in value.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
        os.sched_setaffinity(0, cpus)
    else:
        raise OSError(22, f"unknown condition {key!r}")


def exec_with_pdeathsig(
    parent: int, status_fd: int, argv: list[str], options: Sequence[str] = ()
) -> int:
    """The trainer's first moments: ask the kernel for SIGKILL when the harness dies, apply
    the host conditions (`options`: cgroup=DIR, as=BYTES, cpus=LIST), then exec the command;
    on failure, send "ERRNO WHAT" back through `status_fd`."""
    import ctypes  # only here: the reaper process never needs it

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the harness died before prctl: do not start at all
        return 137
    os.set_inheritable(status_fd, False)  # a successful exec closes it: EOF, no errno
    what = "exec"
    try:
        for option in options:
            what = option.partition("=")[0]
            _apply(option)
        what = "exec"
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(status_fd, f"{exc.errno or 22} {what}\n".encode())
    except ValueError:  # a malformed option: the harness's bug, said as EINVAL
        os.write(status_fd, f"22 {what}\n".encode())
    return 127


def main(args: list[str]) -> int:
    if args[:1] == ["serve"] and len(args) == 3:
        return serve(int(args[1]), int(args[2]))
    if args[:1] == ["exec"] and "--" in args[3:]:
        end = args.index("--", 3)
        return exec_with_pdeathsig(int(args[1]), int(args[2]), args[end + 1 :], args[3:end])
    _note("usage: reaper.py serve CTL_FD HARNESS_PID | exec PARENT_PID STATUS_FD [K=V ...] -- ARGV")
    return 2


# ---------------------------------------------------------------- the harness's side


def _python(*args: str) -> list[str]:
    # -I -S: no site, no user environment, no harness package: a fast, import-light start
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), *args]


def pdeathsig_argv(argv: Sequence[str], status_fd: int, options: Sequence[str] = ()) -> list[str]:
    """`argv` wrapped so that it runs with PR_SET_PDEATHSIG(SIGKILL) toward this process
    (pass `status_fd`, the write end of a pipe, to the child; see `exec_status`), under the
    host conditions `options` (see `exec_with_pdeathsig`)."""
    return _python("exec", str(os.getpid()), str(status_fd), *options, "--", *argv)


def new_cookie() -> str:
    """A random token for COOKIE_VAR in the trainer's environment (one per run): every
    descendant that keeps its environment carries it, even one whose ancestry is lost."""
    return os.urandom(12).hex()


def exec_status(read_fd: int) -> int | None:
    """Wait until the wrapped command has exec'd (None) or failed to (its errno)."""
    failure = exec_failure(read_fd)
    return None if failure is None else failure[0]


def exec_failure(read_fd: int) -> tuple[int, str] | None:
    """Wait until the wrapped command has exec'd (None) or failed to: (errno, the step that
    failed: "exec", or a condition's key: "cpus", "as", "cgroup")."""
    data = b""
    while chunk := os.read(read_fd, 64):
        data += chunk
    words = data.split()
    return (int(words[0]), words[1].decode() if len(words) > 1 else "exec") if words else None


class Reaper:
    """The harness's handle on its reaper process: `start()`, `watch(pid)`, `release()`.

    If the reaper cannot start or dies, the harness says so once on stderr and runs on
    without it (kill_tree still cleans up every exit path the harness itself survives)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.ctl: int | None = None  # the write end: only the harness holds it
        self.startup_s = 0.0

    @classmethod
    def start(cls) -> Reaper:
        import subprocess

        self = cls()
        t0 = time.monotonic()
        read_fd, self.ctl = os.pipe()
        try:
            self.proc = subprocess.Popen(
                _python("serve", str(read_fd), str(os.getpid())),
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                start_new_session=True,  # not in the harness's process group or session
            )
        except OSError as exc:
            self._fail(f"cannot start: {exc}")
            return self
        finally:
            os.close(read_fd)
        assert self.proc.stdout is not None
        try:
            ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
            line = self.proc.stdout.readline() if ready else b""
        except BaseException:  # interrupted: no reaper, and none left behind
            self._close()
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc.stdout.close()
        if line != b"ready\n":
            self._fail("did not start")
        self.startup_s = time.monotonic() - t0
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def watch(self, pid: int, cookie: str = "") -> None:
        """Follow the tree of `pid`, whose environment holds COOKIE_VAR=`cookie` if given."""
        self._send(f"watch {pid} {cookie}\n" if cookie else f"watch {pid}\n")

    def release(self) -> None:
        """The harness cleaned up itself: the reaper exits without killing anything."""
        self._end("done\n")

    def kill(self) -> None:
        """Kill the watched tree now, as on the harness's death (escapees that left its
        session included), and wait until the reaper is done: how a build ends."""
        self._end("kill\n", KILL_DEADLINE_S + 5)

    def _end(self, line: str, wait_s: float = 5.0) -> None:
        self._send(line)
        self._close()
        if self.proc is not None:
            import subprocess

            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _send(self, line: str) -> None:
        if self.ctl is None:
            return
        try:
            os.write(self.ctl, line.encode())
        except OSError as exc:
            self._fail(f"is gone ({exc.strerror})")

    def _close(self) -> None:
        if self.ctl is not None:
            os.close(self.ctl)
            self.ctl = None

    def _fail(self, why: str) -> None:
        print(
            f"harness: warning: the reaper {why}; a SIGKILL of the harness may leave "
            "processes behind",
            file=sys.stderr,
        )
        self._close()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def start() -> Reaper:
    return Reaper.start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
