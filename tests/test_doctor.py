"""The doctor's probes, run for real on this machine. What they must find is what the
platform has (tests/facts.py): the OpenMP runtime gcc links (libgomp or LLVM's libomp), the
NVML library, a visible GPU, nvcc."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from harness import doctor
from harness.doctor import host, tools
from harness.doctor.gpu import judge_nvml
from harness.doctor.model import ProbeContext
from harness.doctor.openmp import judge_fork
from harness.doctor.tracing import probe_ptrace
from harness.process.tools import started
from harness.sampling import tools as stack_tools
from harness.vocab import DoctorStatus, StackToolKind
from tests import facts
from tests.harness_cli import living_descendants

pytestmark = pytest.mark.timeout(60)

NAMES = {
    "tool:gcc",
    "tool:gdb",
    "tool:eu-stack",
    "tool:py-spy",
    "tool:git",
    "tool:ccache",
    "tool:nvcc",
    "openmp",
    "openmp-after-fork",
    "ptrace",
    "py-spy",
    "nvml",
    "cuda",
    "gpu:cuda-init",
    "gpu:alloc-3gb",
    "gpu:pinned-async",
    "gpu:cublas",
    "gpu:nvml-values",
    "cpu/container",
}


Real = tuple[dict[str, doctor.Probe], float, list[psutil.Process]]


@pytest.fixture(scope="module")
def real() -> Real:
    """One full run shared by the tests: probes by name, wall time, processes left."""
    start = time.monotonic()
    probes = doctor.run_doctor(timeout_s=10.0)
    wall = time.monotonic() - start
    return {p.name: p for p in probes}, wall, living_descendants()


def test_every_probe_reports_a_known_status(
    real: Real,
) -> None:
    probes, wall, _ = real
    assert set(probes) == NAMES
    assert all(p.status in doctor.STATUSES for p in probes.values())
    assert wall < 30


@pytest.fixture(scope="module")
def runtime() -> str:
    """The OpenMP runtime here, by the doctor's own detection (skips when it cannot tell,
    and fails under CI, where setup.sh installed gcc with libgomp)."""
    found = facts.openmp_runtime()
    if facts.is_libgomp(found) is None:
        facts.missing(f"an answer from the OpenMP runtime probe ({found})", "the doctor's checks")
    return found


def test_openmp_runs_a_team(real: Real, runtime: str) -> None:
    probe = real[0]["openmp"]
    assert probe.status == "ok", probe
    assert "team of 2" in probe.detail
    assert runtime in probe.detail  # names the runtime ldd resolves


def test_openmp_after_fork_follows_the_runtime(real: Real, runtime: str) -> None:
    probes, _, left = real
    probe = probes["openmp-after-fork"]
    assert runtime in probe.detail
    if facts.is_libgomp(runtime):
        # GNU libgomp deadlocks in the forked child: a platform fact, not a failure
        assert probe.status == "warn", probe
        assert doctor.FORK_HAZARD in probe.detail
        assert re.search(r"child hung > \d+\.\ds \(child state \S in \S+\)", probe.detail), probe
    else:
        # LLVM libomp (and Intel's) reset themselves after fork: the child's team runs
        assert probe.status == "ok", probe
        assert probe.detail.startswith("fork-safe OpenMP runtime (child team ")
        assert doctor.FORK_HAZARD not in probe.detail
    assert probe.duration_s < doctor.FORK_LIMIT_S + 2.0
    assert left == [], f"processes left behind: {left}"


def test_ptrace_works_as_root(
    real: Real,
) -> None:
    facts.require_root("a non-root sibling attach depends on ptrace_scope")
    probe = real[0]["ptrace"]
    assert probe.status == "ok", probe
    assert "CAP_SYS_PTRACE=yes" in probe.detail


def test_py_spy_dumps_a_python_child(
    real: Real,
) -> None:
    if real[0]["ptrace"].status != "ok":
        facts.missing("ptrace (denied on this machine)", "py-spy attaches with ptrace")
    probe = real[0]["py-spy"]
    assert probe.status == "ok", probe


def test_nvml_probe_follows_the_platform(real: Real) -> None:
    probe = real[0]["nvml"]
    assert "the probe itself failed" not in probe.detail
    if not facts.nvml_loadable():
        # no driver library: the reason, and what it means for the 5.0 dashboard
        assert probe.status == "warn", probe
        assert probe.detail.startswith(doctor.NO_NVML), probe
        assert "--gpus all" in probe.hint
    elif facts.gpu_visible():
        # the driver answers: the probe reads device 0's utilization
        assert probe.status == "ok", probe
        assert re.match(r"\d+ GPU\(s\); device 0 utilization gpu \d+% mem \d+%", probe.detail)
    else:
        # the library loads but there is no GPU behind it: init or the count fails
        assert probe.status == "warn", probe
        assert doctor.NO_NVML not in probe.detail
        assert "util/gpu_percent" in probe.hint


def test_cuda_probe_follows_the_platform(real: Real) -> None:
    probe = real[0]["cuda"]
    nvcc = shutil.which("nvcc")
    assert ("no nvcc" in probe.detail) is (nvcc is None), probe
    if not facts.gpu_visible():
        assert probe.status == "warn", probe
        assert doctor.NO_GPU in probe.detail
        assert "; no GPU; " in probe.detail
        return
    assert doctor.NO_GPU not in probe.detail, probe
    missing = "libs missing:" in probe.detail
    assert probe.status == ("warn" if nvcc is None or missing else "ok"), probe
    assert ("install the CUDA toolkit" in probe.hint) is missing


def test_render_and_json_name_every_probe(
    real: Real,
) -> None:
    probes = list(real[0].values())
    text = doctor.render(probes)
    data = json.loads(json.dumps(doctor.to_json(probes)))
    assert all(name in text for name in NAMES)
    assert {p["name"] for p in data["probes"]} == NAMES
    assert data["schema"] == doctor.SCHEMA
    assert data["ok"] is (not any(p.status == "fail" for p in probes))


def test_path_without_gdb_degrades_to_eu_stack(tmp_path: Path) -> None:
    # a PATH with eu-stack only: gcc is gone too, so the OpenMP probes fail fast
    (tmp_path / "eu-stack").symlink_to("/usr/bin/eu-stack")
    probes = {p.name: p for p in doctor.run_doctor(timeout_s=10.0, path=str(tmp_path))}
    assert set(probes) == NAMES
    gdb = probes["tool:gdb"]
    assert gdb.status == "warn"
    # eu-stack comes first in the sampler's registry: gdb is its fallback
    assert "the fallback after eu-stack" in gdb.hint
    assert "native stacks come from eu-stack alone" in gdb.hint
    assert probes["tool:eu-stack"].status == "ok"
    assert probes["tool:gcc"].status == "fail"
    assert probes["openmp"].status == "fail"
    assert probes["openmp-after-fork"].status == "skip"
    assert probes["ptrace"].status == "ok" and "eu-stack" in probes["ptrace"].detail
    assert living_descendants() == []


@pytest.mark.needs_tool("gdb", why="the ptrace probe's fallback tool")
def test_path_without_eu_stack_says_gdb_takes_over(tmp_path: Path) -> None:
    (tmp_path / "gdb").symlink_to(str(shutil.which("gdb")))
    ctx = ProbeContext.make(10.0, str(tmp_path))
    eu = tools.probe_tool(next(t for t in tools.TOOLS if t.name == "eu-stack"), ctx)
    assert eu.status == "warn" and eu.detail == "eu-stack not found on PATH"
    assert eu.hint.startswith("install elfutils")
    assert "the first native stack tool" in eu.hint
    assert "native stacks come from gdb alone" in eu.hint
    # the ptrace probe attaches the way the sampler would: here with gdb
    if os.geteuid() == 0:
        probe = probe_ptrace(ctx)
        assert probe.status == "ok" and probe.detail.startswith("gdb attached"), probe
    assert living_descendants() == []


def test_stack_tools_follow_the_sampler_registry() -> None:
    stack = [t.name for t in tools.TOOLS if t.stack is not None]
    assert stack == [t.name.value for t in stack_tools.TOOLS]
    assert len(stack) >= 3
    names = [t.name for t in tools.TOOLS]
    assert names.index("gcc") < names.index(stack[0])  # stack tools after gcc, in order
    assert names[names.index(stack[0]) : names.index(stack[0]) + len(stack)] == stack


def test_no_stack_tool_at_all(tmp_path: Path) -> None:
    probes = {p.name: p for p in doctor.run_doctor(timeout_s=10.0, path=str(tmp_path))}
    for tool in stack_tools.of_kind(StackToolKind.NATIVE):
        assert "samples have no native stacks" in probes[f"tool:{tool.name}"].hint
    assert "samples have no Python stacks" in probes["tool:py-spy"].hint or (
        probes["tool:py-spy"].status == "ok"  # py-spy is also found next to the interpreter
    )
    assert probes["ptrace"].status == "skip"
    assert "no eu-stack or gdb to attach with" in probes["ptrace"].detail


def _fake_native_tools(folder: Path, body: str) -> None:
    """Every native stack tool of the registry as a script: the probe uses the first."""
    for tool in stack_tools.of_kind(StackToolKind.NATIVE):
        exe = folder / tool.name
        exe.write_text(f"#!/bin/sh\n{body}\n")
        exe.chmod(0o755)


def test_ptrace_denied_gives_the_capability_hint(tmp_path: Path) -> None:
    _fake_native_tools(tmp_path, 'echo "ptrace: Operation not permitted." >&2; exit 1')
    probe = probe_ptrace(ProbeContext.make(5.0, str(tmp_path)))
    assert probe.status == "fail"
    assert probe.hint == doctor.PTRACE_HINT
    assert living_descendants() == []


def test_a_hanging_attach_is_cut_off_and_cleaned_up(tmp_path: Path) -> None:
    _fake_native_tools(tmp_path, "exec sleep 30")
    start = time.monotonic()
    probe = probe_ptrace(ProbeContext.make(1.0, f"{tmp_path}:/usr/bin:/bin"))
    assert time.monotonic() - start < 4.0
    assert probe.status == "fail" and "did not attach" in probe.detail
    assert living_descendants() == []


def test_a_raising_probe_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: object) -> doctor.Probe:
        raise RuntimeError("boom")

    monkeypatch.setattr(host, "probe_cpu", boom)
    probes = doctor.run_doctor(timeout_s=10.0, path="")
    cpu = next(p for p in probes if p.name == "cpu/container")
    assert cpu.status == "warn" and "boom" in cpu.detail
    assert {p.name for p in probes} == NAMES


def test_main_exit_code_follows_fail(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    ok = [doctor.Probe("a", DoctorStatus.OK, "fine"), doctor.Probe("b", DoctorStatus.WARN, "meh")]
    monkeypatch.setattr(doctor, "run_doctor", lambda timeout_s: ok)
    assert doctor.main(argparse.Namespace(json=True)) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["warn"] == 1
    monkeypatch.setattr(
        doctor, "run_doctor", lambda timeout_s: [*ok, doctor.Probe("c", DoctorStatus.FAIL, "x")]
    )
    assert doctor.main(argparse.Namespace(json=False)) == 1
    assert "c " in capsys.readouterr().out


def test_fork_verdicts_from_program_output() -> None:
    from harness.process.tools import ToolResult

    done = ToolResult(["p"], 0, "parent-team=2\nchild-done team=2\n", "", 0.1)
    assert judge_fork(done, "runtime libomp.so", 3.0).status == "ok"
    killed = ToolResult(["p"], None, "parent-team=2\n", "", 5.0)
    assert judge_fork(killed, "runtime libgomp.so.1", 3.0).status == "warn"


def test_nvml_partial_library_is_a_warning() -> None:
    partial = {"binding": "ctypes", "error": "nvmlDeviceGetCount_v2 returned 999 (Unknown Error)"}
    probe = judge_nvml(partial)
    assert probe.status == "warn" and "garbage" in probe.hint
    gpu = judge_nvml({"binding": "pynvml", "count": 1, "gpu": 0, "mem": 3})
    assert gpu.status == "ok" and "gpu 0%" in gpu.detail


# ------------------------------------------------ process.tools.started (the probes' targets)

_READY_THEN_WAIT = "import time; print('ready', flush=True); time.sleep(30)"


def test_started_waits_for_ready_and_kills_the_session(python_exe: str) -> None:
    # a grandchild in the same session must go too (the shell's background sleep)
    argv = ["sh", "-c", f'sleep 30 & echo "kid $!"; exec {python_exe} -c "{_READY_THEN_WAIT}"']
    with started(argv, ready="ready") as target:
        assert target.ready and b"kid " in target.output
        kid = int(target.output.split(b"kid ")[1].split()[0])
        assert psutil.pid_exists(target.pid) and psutil.pid_exists(kid)
    assert target.proc.returncode == -signal.SIGKILL
    assert not _running(kid)
    assert living_descendants() == []


def test_started_kills_and_reaps_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="probe bug"), started(["sleep", "30"]) as target:
        raise RuntimeError("probe bug")
    assert target.proc.returncode == -signal.SIGKILL
    assert living_descendants() == []


def test_started_limit_kills_a_child_whose_block_hangs() -> None:
    start = time.monotonic()
    with started(["sleep", "30"], limit_s=0.3) as target:
        deadline = time.monotonic() + 5
        while _running(target.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _running(target.pid)  # killed by the limit, not yet reaped
        assert 0.25 < time.monotonic() - start < 3
    assert target.proc.returncode == -signal.SIGKILL
    assert living_descendants() == []


def test_started_ready_times_out(python_exe: str) -> None:
    start = time.monotonic()
    with started(
        [python_exe, "-c", "import time; time.sleep(30)"], ready="ready", ready_s=0.3
    ) as t:
        assert not t.ready and t.output == b""
        assert 0.25 < time.monotonic() - start < 3
    assert living_descendants() == []


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
