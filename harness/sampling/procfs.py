"""Threads and processes of a tree as /proc and psutil show them: per-thread state, wait
channel, syscall and CPU time; snapshots of the whole tree over time, and each thread's
activity across them. Anything that vanishes while we look is skipped, never raised about."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence

import psutil

from harness.files import read_text
from harness.sampling.model import ProcessSample, Snapshot, ThreadActivity, ThreadSample

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PYTHON_BASENAME = re.compile(r"^python\d*(\.\d+)?[a-z]?$")


def read_thread(pid: int, tid: int) -> ThreadSample | None:
    """State, wchan, syscall and CPU time of one thread, or None if it is gone."""
    base = f"/proc/{pid}/task/{tid}"
    stat = read_text(f"{base}/stat")
    if not stat or ")" not in stat:
        return None
    # comm may contain spaces and parentheses: the fields start after the LAST ')'
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    wchan = (read_text(f"{base}/wchan") or "").strip()
    syscall = (read_text(f"{base}/syscall") or "").split()
    return ThreadSample(
        tid=tid,
        name=comm,
        state=fields[0],
        wchan="" if wchan == "0" else wchan,
        syscall=syscall[0] if syscall else "",
        cpu_time=(int(fields[11]) + int(fields[12])) / _CLK_TCK,
    )


def _task_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def read_threads(pid: int) -> list[ThreadSample]:
    threads = (read_thread(pid, tid) for tid in _task_ids(pid))
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


def _snapshot(root_pid: int, t0: float) -> Snapshot:
    t = time.monotonic() - t0
    samples = (_sample_process(p) for p in _tree(root_pid))
    return Snapshot(t=t, processes=[s for s in samples if s is not None])


def take_snapshots(root_pid: int, n: int, interval: float, t0: float) -> list[Snapshot]:
    snaps = []
    for i in range(n):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        snaps.append(_snapshot(root_pid, t0))
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
