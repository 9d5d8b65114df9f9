"""Threads and processes of a tree as /proc and psutil show them: per-thread state, wait
channel, syscall and CPU time; snapshots of the whole tree over time, and each thread's
activity across them. Anything that vanishes while we look is skipped, never raised about."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Collection, Sequence

import psutil

from harness.files import read_text
from harness.sampling.model import ProcessSample, Snapshot, ThreadActivity, ThreadSample

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PYTHON_BASENAME = re.compile(r"^python\d*(\.\d+)?[a-z]?$")


_SMALL, _BIG = 8192, 65536


def read_proc(path: str, size: int = _SMALL) -> str | None:
    """A /proc file, at most `size` bytes, without a buffered file object (the watch loop
    reads several per thread, several times a second), or None when it vanished or cannot
    be read. A seq file (maps, locks, net/tcp) gives about a page a read: read to its end."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        left = size
        while left > 0:
            data = os.read(fd, left)
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(text: str | None) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a stat line; the first field after comm is the state."""
    if not text or ")" not in text:
        return None
    # comm may contain spaces and parentheses: the fields start after the LAST ')'
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _syscall(text: str | None) -> tuple[str, list[int]]:
    """("202", [six args]) when blocked in a syscall, ("running", []), ("-1", []) when
    blocked outside one, ("", []) when unreadable."""
    parts = (text or "").split()
    if not parts:
        return "", []
    if parts[0] in ("running", "-1") or len(parts) < 7:
        return parts[0], []
    try:
        return parts[0], [int(a, 16) for a in parts[1:7]]
    except ValueError:
        return parts[0], []


class ProcFiles:
    """Per-thread /proc files kept open and re-read with pread: a third of the CPU of an
    open/read/close each time (the watch loop reads four per thread, four times a second).

    An open file stays bound to its thread: once the thread is gone (and reaped) a read
    fails, never shows another thread that got the tid. At most `limit` files stay open
    (past it, files are opened and closed per read); `sweep` closes those of vanished
    threads, `close` all of them.
    """

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self._fds: dict[tuple[int, int], dict[str, int]] = {}
        self._count = 0

    def read(self, pid: int, tid: int, name: str) -> str | None:
        files = self._fds.get((pid, tid))
        fd = files.get(name) if files is not None else None
        size = _BIG if name == "children" else _SMALL
        if fd is not None:
            try:
                return os.pread(fd, size, 0).decode("utf-8", "replace")
            except OSError:
                return None
        path = f"/proc/{pid}/task/{tid}/{name}"
        if self._count >= self.limit:
            return read_proc(path)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        self._fds.setdefault((pid, tid), {})[name] = fd
        self._count += 1
        try:
            return os.pread(fd, size, 0).decode("utf-8", "replace")
        except OSError:
            return None

    def sweep(self, alive: set[tuple[int, int]]) -> None:
        for key in [k for k in self._fds if k not in alive]:
            self._close(key)

    def close(self) -> None:
        for key in list(self._fds):
            self._close(key)

    def _close(self, key: tuple[int, int]) -> None:
        for fd in self._fds.pop(key).values():
            os.close(fd)
            self._count -= 1


def read_thread(pid: int, tid: int, files: ProcFiles | None = None) -> ThreadSample | None:
    """State, wchan, syscall (number and arguments) and CPU time of one thread, or None if
    it is gone. With `files`, through its kept-open files."""
    if files is None:
        base = f"/proc/{pid}/task/{tid}"
        stat = read_proc(f"{base}/stat")
    else:
        stat = files.read(pid, tid, "stat")
    parsed = _stat_fields(stat)
    if parsed is None or len(parsed[1]) < 13:
        return None
    comm, fields = parsed
    if files is None:
        wchan_text, syscall_text = read_proc(f"{base}/wchan"), read_proc(f"{base}/syscall")
    else:
        wchan_text, syscall_text = files.read(pid, tid, "wchan"), files.read(pid, tid, "syscall")
    wchan = (wchan_text or "").strip()
    number, args = _syscall(syscall_text)
    return ThreadSample(
        tid=tid,
        name=comm,
        state=fields[0],
        wchan="" if wchan == "0" else wchan,
        syscall=number,
        cpu_time=(int(fields[11]) + int(fields[12])) / _CLK_TCK,
        syscall_args=args,
    )


def task_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return []


def task_children(pid: int, tid: int, files: ProcFiles | None = None) -> list[int] | None:
    """The children a thread forked (/proc/PID/task/TID/children), or None when the kernel
    has no such file (CONFIG_PROC_CHILDREN)."""
    if files is not None:
        text = files.read(pid, tid, "children")
    else:
        text = read_proc(f"/proc/{pid}/task/{tid}/children", _BIG)
    if text is None:
        return None if not os.path.exists(f"/proc/{pid}/task/{tid}") else []
    return [int(c) for c in text.split()]


def process_ppid(pid: int) -> int | None:
    parsed = _stat_fields(read_proc(f"/proc/{pid}/stat"))
    return int(parsed[1][1]) if parsed is not None and len(parsed[1]) > 1 else None


def process_group(pid: int) -> int | None:
    """The process group of `pid` (stat field 5)."""
    parsed = _stat_fields(read_proc(f"/proc/{pid}/stat"))
    if parsed is None or len(parsed[1]) < 3 or not parsed[1][2].lstrip("-").isdigit():
        return None
    return int(parsed[1][2])


def zombie_status(pid: int) -> int | None:
    """The wait status of a zombie process (stat field 52, Linux 3.5+), or None when it is
    not a zombie or the field cannot be read."""
    parsed = _stat_fields(read_proc(f"/proc/{pid}/stat"))
    if parsed is None or parsed[1][0] != "Z" or len(parsed[1]) < 50:
        return None
    try:
        return int(parsed[1][49])
    except ValueError:
        return None


def thread_runs(pid: int, tid: int, files: ProcFiles | None = None) -> int | None:
    """How many times the thread was put on a CPU (/proc/.../schedstat, third field)."""
    path = f"/proc/{pid}/task/{tid}/schedstat"
    text = files.read(pid, tid, "schedstat") if files is not None else read_proc(path)
    fields = (text or "").split()
    return int(fields[2]) if len(fields) >= 3 and fields[2].isdigit() else None


def fd_target(pid: int, fd: int) -> str | None:
    """What an fd is: "pipe:[123]", "socket:[456]", "/dev/pts/0", a path; None if unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


_O_ACCMODE = 0o3


def fd_mode(pid: int, fd: int) -> int | None:
    """O_RDONLY, O_WRONLY or O_RDWR (fdinfo `flags`), None when unreadable."""
    for line in (read_proc(f"/proc/{pid}/fdinfo/{fd}") or "").splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & _O_ACCMODE
    return None


def fd_writable(pid: int, fd: int) -> bool:
    """The fd was opened for writing (fdinfo `flags`: O_WRONLY or O_RDWR)."""
    return fd_mode(pid, fd) in (os.O_WRONLY, os.O_RDWR)


def fd_targets(pid: int) -> list[tuple[int, str]]:
    """Every fd of `pid` with what it is (readlink), those it may read; [] when none can."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    return [(int(n), t) for n in names if n.isdigit() and (t := fd_target(pid, int(n)))]


def pipe_holders(pid: int, inodes: Collection[int]) -> tuple[set[int], set[int]]:
    """Which of these pipe inodes process `pid` holds open (its fds it can read): (for
    writing, for reading); an fd open both ways counts in both."""
    wanted = {f"pipe:[{ino}]": ino for ino in inodes}
    written: set[int] = set()
    read: set[int] = set()
    for fd, target in fd_targets(pid):
        ino = wanted.get(target)
        if ino is None:
            continue
        mode = fd_mode(pid, fd)
        if mode in (os.O_WRONLY, os.O_RDWR):
            written.add(ino)
        if mode in (os.O_RDONLY, os.O_RDWR):
            read.add(ino)
    return written, read


def all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def thread_started(pid: int, tid: int) -> float | None:
    """When the thread started, on time.monotonic()'s clock (stat field 22, clock ticks
    since boot, read against CLOCK_BOOTTIME); a tick early, so never later than the truth."""
    parsed = _stat_fields(read_proc(f"/proc/{pid}/task/{tid}/stat"))
    if parsed is None or len(parsed[1]) < 20 or not parsed[1][19].isdigit():
        return None
    booted = int(parsed[1][19]) / _CLK_TCK
    offset = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
    return booted - offset - 1 / _CLK_TCK


def is_32bit(pid: int) -> bool:
    """The process runs a 32-bit ELF (compat syscall numbers differ from the native ones)."""
    try:
        with open(f"/proc/{pid}/exe", "rb") as f:
            head = f.read(5)
    except OSError:
        return False
    return head[:4] == b"\x7fELF" and head[4:5] == b"\x01"


def exe_cmdline(pid: int, tid: int | None = None) -> tuple[str, list[str]]:
    """The executable and argv of a process, read through thread `tid` (default: the main
    thread; "" and [] when unreadable)."""
    return _task_exe_cmdline(pid, pid if tid is None else tid)


def read_threads(pid: int) -> list[ThreadSample]:
    threads = (read_thread(pid, tid) for tid in task_ids(pid))
    return [t for t in threads if t is not None]


def live_tid(pid: int, threads: Sequence[ThreadSample]) -> int | None:
    """A thread to read per-process facts through and to attach to.

    When the main thread has exited (pthread_exit) the leader is a zombie: /proc/PID/exe,
    cmdline and maps read empty and ptrace on PID fails, but a live thread's task dir
    still has them and attaching to its tid reaches the whole thread group.
    """
    for t in threads:
        if t.tid == pid and t.state not in "ZX":
            return pid
    for t in threads:
        if t.state not in "ZX":
            return t.tid
    return None


def _task_exe_cmdline(pid: int, tid: int) -> tuple[str, list[str]]:
    base = f"/proc/{pid}/task/{tid}"
    try:
        exe = os.readlink(f"{base}/exe")
    except OSError:
        exe = ""
    raw = read_text(f"{base}/cmdline") or ""
    return exe, [a for a in raw.split("\0") if a]


def _exe_cmdline(proc: psutil.Process, threads: Sequence[ThreadSample]) -> tuple[str, list[str]]:
    try:
        return proc.exe(), proc.cmdline()
    except (psutil.ZombieProcess, psutil.AccessDenied):
        tid = live_tid(proc.pid, threads)
        return _task_exe_cmdline(proc.pid, tid) if tid is not None else ("", [])


def is_python(exe: str, cmdline: Sequence[str]) -> bool:
    names = [os.path.basename(exe), *(os.path.basename(a) for a in cmdline[:1])]
    return any(_PYTHON_BASENAME.match(n) for n in names if n)


def _sample_process(proc: psutil.Process) -> ProcessSample | None:
    try:
        with proc.oneshot():
            threads = read_threads(proc.pid)
            exe, cmdline = _exe_cmdline(proc, threads)
            return ProcessSample(
                pid=proc.pid,
                ppid=proc.ppid(),
                name=proc.name(),
                exe=exe,
                cmdline=cmdline,
                status=proc.status(),
                is_python=is_python(exe, cmdline),
                threads=threads,
            )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _tree(root_pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def snapshot(root_pid: int, t0: float) -> Snapshot:
    t = time.monotonic() - t0
    samples = (_sample_process(p) for p in _tree(root_pid))
    return Snapshot(t=t, processes=[s for s in samples if s is not None])


def take_snapshots(root_pid: int, n: int, interval: float, t0: float) -> list[Snapshot]:
    snaps = []
    for i in range(n):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        snaps.append(snapshot(root_pid, t0))
    return snaps


def last_seen(snapshots: Sequence[Snapshot]) -> list[ProcessSample]:
    """The processes of the last snapshot that are still there, refreshed for attaching."""
    procs = snapshots[-1].processes if snapshots else []
    fresh = (_resample(p.pid) for p in procs)
    return [p for p in fresh if p is not None]


def _resample(pid: int) -> ProcessSample | None:
    try:
        return _sample_process(psutil.Process(pid))
    except psutil.Error:
        return None


def compute_activity(snapshots: Sequence[Snapshot]) -> list[ThreadActivity]:
    seen: dict[tuple[int, int], list[tuple[float, ThreadSample]]] = {}
    for snap in snapshots:
        for proc in snap.processes:
            for th in proc.threads:
                seen.setdefault((proc.pid, th.tid), []).append((snap.t, th))
    return [_thread_activity(pid, tid, obs) for (pid, tid), obs in seen.items()]


def _thread_activity(
    pid: int, tid: int, obs: Sequence[tuple[float, ThreadSample]]
) -> ThreadActivity:
    (t_first, first), (t_last, last) = obs[0], obs[-1]
    elapsed = t_last - t_first
    used = last.cpu_time - first.cpu_time
    return ThreadActivity(
        pid=pid,
        tid=tid,
        name=last.name,
        states=[th.state for _, th in obs],
        cpu_fraction=max(0.0, used / elapsed) if elapsed > 0 else 0.0,
        wchan=last.wchan,
        syscall=last.syscall,
    )
