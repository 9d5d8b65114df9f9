"""The host fingerprint (issue 19, "A host fingerprint in every report"): this host's real
facts, the trainer's affinity as given, a compiler that is missing, broken or hangs (real
scripts on a real PATH), bounded reads of a FIFO and of a file larger than the cap, the
threading variables kept and the secrets left out, the cost, and the round trip through
report.json (older reports without `host` still load)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.doctor import fingerprint
from harness.doctor.fingerprint import (
    HostFingerprint,
    compare_fingerprints,
    cpu_ranges,
    take_fingerprint,
    threading_env,
)
from harness.errors import HarnessError
from harness.execute.conditions import HostConditions
from harness.report.load import load_report, report_from_json
from harness.report.model import Report
from harness.vocab import RunMode
from tests.harness_cli import harness

pytestmark = pytest.mark.timeout(120)


def _script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_this_hosts_facts_are_real() -> None:
    fp = take_fingerprint(os.environ)
    assert fp.cpus_online is not None and fp.cpus_online >= 1
    assert fp.kernel == os.uname().release != ""
    assert fp.machine == os.uname().machine
    assert fp.affinity == sorted(os.sched_getaffinity(0))
    # nothing passed: the trainer inherits the harness's own affinity
    assert fp.trainer_affinity == fp.affinity
    assert fp.load is not None and len(fp.load) == 3
    assert fp.libc == (os.confstr("CS_GNU_LIBC_VERSION") or "")
    if fp.cpus_online_list:
        assert fingerprint._count_cpus(fp.cpus_online_list) == fp.cpus_online
    assert fp.cpu_quota is None or fp.cpu_quota > 0
    assert fp.memory_limit is None or fp.memory_limit > 0
    assert (fp.gpu_driver == "") == (not Path("/proc/driver/nvidia/version").exists())
    json.dumps(fp.to_json())  # JSON-able as it is


def test_the_trainers_affinity_shows_as_given() -> None:
    own = sorted(os.sched_getaffinity(0))
    fp = take_fingerprint({}, [own[0]])
    assert fp.trainer_affinity == [own[0]]
    assert fp.affinity == own


def test_a_missing_compiler_is_empty_not_an_error(tmp_path: Path) -> None:
    fp = take_fingerprint({"PATH": str(tmp_path)})  # a PATH without cc
    assert (fp.compiler, fp.openmp_runtime) == ("", "")
    assert fp.kernel  # the rest is still there


def test_a_failing_or_hanging_compiler_is_empty_and_bounded(tmp_path: Path) -> None:
    _script(tmp_path, "cc", "echo broken >&2; exit 1\n")
    assert take_fingerprint({"PATH": str(tmp_path)}).compiler == ""
    hung = tmp_path / "hung"
    hung.mkdir()
    _script(hung, "cc", "exec sleep 60\n")
    start = time.monotonic()
    fp = take_fingerprint({"PATH": str(hung)})
    assert fp.compiler == ""
    assert time.monotonic() - start < fingerprint.TOOL_TIMEOUT_S + 3


def test_the_compiler_of_cc_and_its_openmp_runtime_resolved(tmp_path: Path) -> None:
    """CC names the compiler (its first word); -print-file-name's answer is followed to the
    real library, and a bare name back (no such library) is not taken for a path."""
    real = tmp_path / "libgomp.so.1.0.0"
    real.write_bytes(b"\x7fELF")
    (tmp_path / "libgomp.so").symlink_to(real.name)
    body = (
        'case "$1" in\n'
        '  --version) echo "fakecc 9.9 (test)"; echo second line;;\n'
        f'  -print-file-name=libgomp.so) echo "{tmp_path}/libgomp.so";;\n'
        '  -print-file-name=*) echo "${1#-print-file-name=}";;\n'
        "esac\n"
    )
    fake = _script(tmp_path, "fakecc", body)
    fp = take_fingerprint({"PATH": "/nonexistent", "CC": f"{fake} -m64"})
    assert fp.compiler == "fakecc 9.9 (test)"
    assert fp.openmp_runtime == str(real)
    bare = tmp_path / "bare"
    bare.mkdir()
    _script(bare, "cc", 'case "$1" in --version) echo barecc 1;; *) echo libgomp.so;; esac\n')
    fp = take_fingerprint({"PATH": str(bare)})
    assert (fp.compiler, fp.openmp_runtime) == ("barecc 1", "")


def test_threading_variables_kept_and_secrets_left_out() -> None:
    env = {
        "OMP_NUM_THREADS": "1",
        "GOMP_SPINCOUNT": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "LD_PRELOAD": "libjemalloc.so",
        "HOME": "/root",
        "NCCL_API_KEY": "s3cret",
        "TORCH_HUB_TOKEN": "t0ken",
        "KMP_AFFINITY": "x" * 5000,
    }
    kept = threading_env(env)
    assert sorted(kept) == [
        "CUDA_VISIBLE_DEVICES",
        "GOMP_SPINCOUNT",
        "KMP_AFFINITY",
        "LD_PRELOAD",
        "OMP_NUM_THREADS",
    ]
    assert len(kept["KMP_AFFINITY"]) == fingerprint.MAX_VALUE
    assert take_fingerprint(env).env == kept
    many = {f"OMP_X{i:04d}": "1" for i in range(1000)}
    assert len(threading_env(many)) == fingerprint.MAX_ENV


def test_reads_are_bounded_a_fifo_and_a_big_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an unbounded open or read would wait forever
    start = time.monotonic()
    assert fingerprint._read(str(fifo)) is None
    assert time.monotonic() - start < 1
    big = tmp_path / "big"
    big.write_bytes(b"x" * (fingerprint.READ_LIMIT * 4))
    assert len(fingerprint._read(str(big)) or "") == fingerprint.READ_LIMIT
    assert fingerprint._read(str(tmp_path / "absent")) is None


def test_cpu_lists() -> None:
    assert cpu_ranges([8, 0, 1, 2, 3]) == "0-3,8"
    assert cpu_ranges([0]) == "0"
    assert cpu_ranges([]) == ""
    assert fingerprint._count_cpus("0-3,8,10-11") == 7
    assert fingerprint._count_cpus("garbage") is None


def test_warm_fingerprint_is_cheap() -> None:
    """Taken once per run before the trainer starts: under 50 ms warm (about 1.5 ms on the
    2-CPU VM of the suite; the compiler is asked once per process)."""
    take_fingerprint(os.environ)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        take_fingerprint(os.environ)
        best = min(best, time.perf_counter() - start)
    assert best < 0.05, f"{best * 1000:.1f} ms"


def test_compare_names_the_trainers_affinity_first() -> None:
    a = take_fingerprint({"OMP_NUM_THREADS": "4"})
    b = HostFingerprint(**{**a.to_json(), "trainer_affinity": [0], "kernel": "0.0-other"})
    b.env = {}
    rows = compare_fingerprints(a, b)
    assert [r[0] for r in rows] == ["trainer_affinity", "env.OMP_NUM_THREADS", "kernel"]
    assert rows[0][2] == "0"
    assert compare_fingerprints(a, a) == []


def test_host_and_conditions_round_trip_typed(tmp_path: Path) -> None:
    report = Report("r", tmp_path, [], RunMode.WATCH)
    report.host = take_fingerprint(os.environ, [0])
    report.conditions = HostConditions(cpus=(0,), cpu_quota=0.5, env={"OMP_NUM_THREADS": "1"})
    data = json.loads(json.dumps(report.to_json()))
    back = report_from_json(data, tmp_path)
    assert back.host == report.host
    assert back.conditions == report.conditions
    assert isinstance(back.conditions, HostConditions)
    assert back.conditions.cpus == (0,)


@pytest.mark.slow
def test_a_real_report_without_host_still_loads(tmp_path: Path) -> None:
    """A report written before `host` and `conditions` existed (the keys removed from a real
    one) reads back with both None; a damaged `host` is refused naming its key."""
    res = harness("watch", "--", sys.executable, "-c", "print(1)", report_root=tmp_path)
    assert res.code == 0, res.stderr
    path = res.folder / "report.json"
    data = json.loads(path.read_text())
    data.pop("host", None)
    data.pop("conditions", None)
    path.write_text(json.dumps(data))
    old = load_report(res.folder)
    assert (old.host, old.conditions) == (None, None)
    data["host"] = {"trainer_affinity": "all of them"}
    path.write_text(json.dumps(data))
    with pytest.raises(HarnessError, match=r"host\.trainer_affinity: expected an array"):
        load_report(res.folder)


def test_gpu_facts_from_the_driver_files(tmp_path: Path) -> None:
    """The NVIDIA kernel module's files as the driver writes them (proprietary and open
    module); no driver: empty, not an error."""
    (tmp_path / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (tmp_path / "gpus" / "0000:02:00.0").mkdir(parents=True)
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 19:46:22 UTC 2024\nGCC version:  gcc 12\n"
    )
    for bus, model in (("0000:01:00.0", "NVIDIA H200"), ("0000:02:00.0", "NVIDIA H100")):
        info = f"Model: \t\t {model}\nIRQ:   \t\t 123\nGPU UUID: \t GPU-0\n"
        (tmp_path / "gpus" / bus / "information").write_text(info)
    assert fingerprint._gpus(str(tmp_path)) == ("550.54.15", ["NVIDIA H200", "NVIDIA H100"])
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024"
    )
    assert fingerprint._gpus(str(tmp_path))[0] == "535.161.07"
    assert fingerprint._gpus(str(tmp_path / "absent")) == ("", [])
