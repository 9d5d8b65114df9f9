"""Host conditions (`--cpus`, `--cpu-quota`, `--memory`, `--load`): real harness runs of
real programs that report what they got from the kernel (their affinity, a thread's, a
forked child's; an allocation that fails; a busy neighbour on their CPU; the CPU time a busy
loop got), and the one-line refusals. docs/hosts.md."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from harness.config.hostprofile import format_cpus, load_host
from harness.errors import HarnessError
from harness.execute import conditions
from harness.execute.conditions import HostConditions, allowed_cpus
from harness.execute.load import LOAD_VAR, NoisyNeighbour
from harness.outcome import CRASH, PASS, USAGE
from harness.pipeline.options import RunOptions, option_flags
from harness.process import reaper
from harness.report.model import Report
from tests.harness_cli import ROOT, harness, wait_for_trainer

pytestmark = pytest.mark.timeout(60)

AFFINITY = textwrap.dedent(
    """
    import os, threading
    def show(who):
        print(who, ",".join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)
    show("main")
    t = threading.Thread(target=show, args=("thread",)); t.start(); t.join()
    pid = os.fork()
    if pid == 0:
        show("child"); os._exit(0)
    os.waitpid(pid, 0)
    """
)


def _program(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def _affinities(output: str) -> dict[str, str]:
    return {w[0]: w[1] for line in output.splitlines() if len(w := line.split()) == 2}


def _watch(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[int, Report, str]:
    """`harness watch ARGS` with a fresh report root: (exit code, the report, output.log)."""
    root = tmp_path / f"r{len(list(tmp_path.glob('r*')))}"
    res = harness("watch", "--quiet", *args, report_root=root, timeout=timeout)
    assert res.report_dir is not None, res.stderr
    return res.code, res.loaded, (res.folder / "output.log").read_text()


def _notes(report: Report) -> list[str]:
    return [n for n in report.notes if n.startswith("host: ")]


# ---------------------------------------------------------------- --cpus


def test_cpus_1_pins_the_trainer_its_threads_and_its_children(tmp_path: Path) -> None:
    prog = _program(tmp_path, "aff.py", AFFINITY)
    code, report, out = _watch(tmp_path, "--cpus", "1", "--", sys.executable, prog)
    assert code == PASS, out
    first = str(allowed_cpus()[0])
    assert _affinities(out) == {"main": first, "thread": first, "child": first}, out
    host = report.host
    assert host is not None and host.trainer_affinity == [int(first)], host
    assert any("sched_setaffinity" in n for n in _notes(report)), _notes(report)
    assert report.conditions == HostConditions(cpus=(int(first),))


def test_a_cpu_list_pins_those_cpus_and_no_option_leaves_them_all(tmp_path: Path) -> None:
    prog = _program(tmp_path, "aff.py", AFFINITY)
    everything = ",".join(map(str, allowed_cpus()))
    code, report, out = _watch(tmp_path, "--", sys.executable, prog)
    assert code == PASS and _affinities(out) == dict.fromkeys(
        ("main", "thread", "child"), everything
    )
    assert _notes(report) == []  # no condition: nothing applied, nothing said
    last = allowed_cpus()[-1]
    code, report, out = _watch(tmp_path, "--cpus", f"{last},", "--", sys.executable, prog)
    assert code == PASS and _affinities(out) == dict.fromkeys(
        ("main", "thread", "child"), str(last)
    )


def test_a_cpu_outside_the_allowed_set_is_one_line_and_usage(tmp_path: Path) -> None:
    outside = max(allowed_cpus()) + 1
    res = harness(
        "watch", "--cpus", f"0,{outside}", "--", "true", report_root=tmp_path / "r", timeout=30
    )
    assert res.code == USAGE
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"harness: error: --cpus 0,{outside}: CPU {outside} is not among")
    assert res.report_dir is None  # refused before any report was started


def test_more_cpus_than_allowed_is_one_line(tmp_path: Path) -> None:
    n = len(allowed_cpus()) + 1
    res = harness("watch", "--cpus", str(n), "--", "true", report_root=tmp_path / "r", timeout=30)
    assert res.code == USAGE and res.stderr.strip().count("\n") == 0, res.stderr
    assert f"this process may use only {n - 1} CPU(s)" in res.stderr


def test_the_wrapper_says_which_condition_the_kernel_refused() -> None:
    """A CPU that does not exist, passed straight to the reaper's exec wrapper (the harness
    checks it first): the wrapper reports EINVAL for `cpus`, and never execs."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        reaper.pdeathsig_argv(["true"], w, ["cpus=4095"]), pass_fds=(w,), close_fds=True
    )
    os.close(w)
    try:
        failure = reaper.exec_failure(r)
    finally:
        os.close(r)
        proc.wait()
    assert failure == (22, "cpus") and proc.returncode == 127


# ---------------------------------------------------------------- --memory

ALLOC = (
    "import sys; b = bytearray(int(sys.argv[1]) << 20); b[-1] = 1; print('allocated', sys.argv[1])"
)


def test_memory_64m_fails_a_200m_allocation_and_lets_16m_pass(tmp_path: Path) -> None:
    argv = (sys.executable, "-I", "-S", "-c", ALLOC)
    code, report, out = _watch(tmp_path, "--memory", "64M", "--", *argv, "16")
    assert code == PASS and "allocated 16" in out, out
    how = "cgroup v2 memory.max" if "memory" in conditions.cgroup_v2().controllers else "RLIMIT_AS"
    assert any(n.startswith("host: memory 64 MiB (") and how in n for n in _notes(report))
    code, report, out = _watch(tmp_path, "--memory", "64M", "--", *argv, "200")
    assert code == CRASH and "allocated" not in out, out
    # the same program without the limit allocates 200 MiB: the limit made the difference
    code, _, out = _watch(tmp_path, "--", *argv, "200")
    assert code == PASS and "allocated 200" in out, out


# ---------------------------------------------------------------- --load

NEIGHBOURS = textwrap.dedent(
    f"""
    import os, time
    def stat(pid):
        data = open(f"/proc/{{pid}}/stat", "rb").read()
        f = data[data.rindex(b")") + 2:].split()
        return int(f[3]), int(f[11]) + int(f[12])  # session, utime + stime (ticks)
    def allowed(pid):
        for line in open(f"/proc/{{pid}}/status"):
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":")[1].strip()
    found = []
    for name in os.listdir("/proc"):
        try:
            env = open(f"/proc/{{name}}/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        mark = [e for e in env if e.startswith(b"{LOAD_VAR}=")]
        if name.isdigit() and mark:
            found.append((int(name), mark[0].split(b"=")[1].decode()))
    before = {{pid: stat(pid)[1] for pid, _ in found}}
    time.sleep(1.0)
    me = os.getsid(0)
    for pid, harness in found:
        sid, ticks = stat(pid)
        print("neighbour", pid, harness, allowed(pid), sid == me, ticks - before[pid], flush=True)
    print("trainer", allowed(os.getpid()), flush=True)
    """
)


def _neighbours_of(harness_pid: int) -> list[psutil.Process]:
    """Live busy processes of the harness `harness_pid` (their environment says so)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get(LOAD_VAR) == str(harness_pid) and p.status() != "zombie":
                found.append(p)
    return found


def test_load_1_runs_a_busy_neighbour_on_the_trainers_cpu_and_none_after(tmp_path: Path) -> None:
    prog = _program(tmp_path, "neighbours.py", NEIGHBOURS)
    code, report, out = _watch(tmp_path, "--cpus", "1", "--load", "1", "--", sys.executable, prog)
    assert code == PASS, out
    rows = [line.split() for line in out.splitlines() if line.startswith("neighbour")]
    assert len(rows) == 1, out
    _, pid, harness_pid, cpus, same_session, ticks = rows[0]
    trainer_cpus = next(line.split()[1] for line in out.splitlines() if line.startswith("trainer"))
    assert cpus == trainer_cpus == str(allowed_cpus()[0])  # pinned where the trainer is
    assert same_session == "False"  # outside the trainer's tree and session
    assert int(ticks) > 0  # busy while the trainer ran (ticks of CPU in its one second)
    assert any(n.startswith("host: load 1 (") and pid in n for n in _notes(report))
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == "zombie"
    assert _neighbours_of(int(harness_pid)) == []


@pytest.mark.slow
def test_a_sigkilled_harness_leaves_no_neighbour(tmp_path: Path) -> None:
    """SIGKILL of the harness while its neighbour runs: PR_SET_PDEATHSIG kills it."""
    report_root = tmp_path / "r"
    sleeper = "import time\nwhile True:\n    print('tick', flush=True); time.sleep(0.2)\n"
    argv = [sys.executable, "-m", "harness", "watch", "--quiet", "--report-dir", str(report_root)]
    argv += ["--load", "2", "--", sys.executable, "-c", sleeper]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        trainer = wait_for_trainer(proc, report_root, 30)
        neighbours = _neighbours_of(proc.pid)
        assert len(neighbours) == 2, neighbours
        assert all(os.getsid(n.pid) != os.getsid(trainer.pid) for n in neighbours)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while (_neighbours_of(proc.pid) or trainer.is_running()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _neighbours_of(proc.pid) == []
        assert not trainer.is_running() or trainer.status() == "zombie"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_the_neighbour_stops_when_its_owner_exits_the_block() -> None:
    with NoisyNeighbour.start(1, allowed_cpus()[:1]) as load:
        (pid,) = load.pids
        assert psutil.Process(pid).cpu_affinity() == list(allowed_cpus()[:1])
        assert os.getsid(pid) == pid  # a session of its own
    assert not psutil.pid_exists(pid)


# ---------------------------------------------------------------- --cpu-quota

BUSY = textwrap.dedent(
    """
    import os, time
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        pass
    c = os.times()
    print("share", (c.user + c.system) / (time.monotonic() - t0))
    """
)


def test_cpu_quota_is_applied_or_refused_as_the_probe_says(tmp_path: Path) -> None:
    """What the harness's own probe finds decides the expectation: a busy loop gets at most
    about 0.5 of a core, or the exact one-line refusal. Never a skip: either way it ran."""
    try:
        conditions.check_available(HostConditions(cpu_quota=0.5))
        refusal = None
    except HarnessError as exc:
        refusal = exc.message
    res = harness(
        "watch", "--quiet", "--cpu-quota", "0.5", "--", sys.executable, "-c", BUSY,
        report_root=tmp_path / "r", timeout=60,
    )  # fmt: skip
    if refusal is not None:
        assert res.code == USAGE and res.stderr.strip() == f"harness: error: {refusal}"
        assert refusal.startswith("--cpu-quota needs a writable cgroup v2") and "neither" in refusal
        assert res.report_dir is None
        return
    assert res.code == PASS, res.stderr
    out = (res.folder / "output.log").read_text()
    share = float(out.split("share")[1].split()[0])
    assert 0.2 < share <= 0.6, out
    notes = _notes(res.loaded)
    assert any(n.startswith("host: cpu quota 0.5 CPU (") for n in notes), notes
    leaves = [p for p in conditions.cgroup_v2().path.glob(f"{conditions.LEAF_PREFIX}*")]
    assert all(not p.name.startswith(f"{conditions.LEAF_PREFIX}{os.getpid()}-") for p in leaves)


# ---------------------------------------------------------------- the value itself


def test_flags_recreate_the_conditions() -> None:
    cpus = allowed_cpus()
    cond = HostConditions(cpus=cpus[:1], cpu_quota=0.25, memory_bytes=64 << 20, load=2)
    assert cond.flags() == [
        "--cpus", "1", "--cpu-quota", "0.25", "--memory", str(64 << 20), "--load", "2",
    ]  # fmt: skip
    last = HostConditions(cpus=cpus[-1:])
    expected = "1" if len(cpus) == 1 else format_cpus(cpus[-1:])
    assert last.flags() == ["--cpus", expected]
    assert HostConditions().flags() == [] and HostConditions().empty


def test_flags_after_a_profile_name_only_what_differs() -> None:
    base = HostConditions.from_profile(load_host("container-1cpu"))
    assert base.flags() == ["--host", "container-1cpu"]
    assert base.overridden(load=3).flags() == ["--host", "container-1cpu", "--load", "3"]


def test_explicit_values_win_over_a_profile() -> None:
    profile = HostConditions(cpus=(0,), load=1, env={"A": "1", "B": "2"}, profile="p")
    merged = profile.merged(HostConditions(load=2, env={"B": "3"}))
    assert merged == HostConditions(cpus=(0,), load=2, env={"A": "1", "B": "3"}, profile="p")
    assert profile.overridden(load=0).load == 0
    assert json.dumps(merged.to_json())  # the report writes it as it is


# ---------------------------------------------------------------- the cgroup leaf


def test_a_delegated_cgroup_gets_a_leaf_with_the_limits_and_the_trainer_joins_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This host may have no delegated cgroup v2 (the quota test then checks the refusal):
    a folder stands for one here, to check what is written and that the real exec wrapper
    joins the leaf (writes "0" to its cgroup.procs) before it execs. A stale leaf of a dead
    harness is removed; the files make rmdir fail here, as processes would in a cgroup."""
    stale = tmp_path / f"{conditions.LEAF_PREFIX}999999999-dead"
    stale.mkdir()
    delegated = conditions.CgroupV2(tmp_path, frozenset({"cpu", "memory"}))
    monkeypatch.setattr(conditions, "cgroup_v2", lambda: delegated)
    applied = conditions.prepare(HostConditions(cpu_quota=0.5, memory_bytes=64 << 20))
    leaf = applied.leaf
    assert leaf is not None and leaf.parent == tmp_path and not stale.exists()
    assert (leaf / "cpu.max").read_text() == "50000 100000"
    assert (leaf / "memory.max").read_text() == str(64 << 20)
    assert applied.wrapper == [f"cgroup={leaf}"] and applied.prefix == []
    assert any("cgroup v2 cpu.max 50000 100000" in line for line in applied.lines)
    r, w = os.pipe()
    proc = subprocess.Popen(reaper.pdeathsig_argv(["true"], w, applied.wrapper), pass_fds=(w,))
    os.close(w)
    try:
        assert reaper.exec_failure(r) is None
    finally:
        os.close(r)
        proc.wait()
    assert proc.returncode == 0 and (leaf / "cgroup.procs").read_text() == "0"


def test_this_hosts_cgroup_v2_is_found_or_said_missing() -> None:
    cg = conditions.cgroup_v2()
    if cg.reason.startswith("no cgroup v2"):
        assert cg.controllers == frozenset()
    else:
        assert cg.path.is_dir() and (cg.path / "cgroup.procs").exists(), cg
    assert cg.why() == ""  # nothing asked, nothing lacking
    assert cg.why("cpu") == "" or "cpu" in cg.why("cpu") or cg.reason


def test_a_child_harness_gets_the_same_conditions() -> None:
    """option_flags (a sweep's cells, a repeated run, the compare a report suggests)."""
    opts = RunOptions(env="cartpole", conditions=HostConditions(cpus=allowed_cpus()[:1], load=1))
    for watch in (False, True):
        assert option_flags(opts, watch=watch)[-4:] == ["--cpus", "1", "--load", "1"]
    assert "--load" not in option_flags(RunOptions(env="cartpole"), watch=True)
