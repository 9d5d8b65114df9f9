"""The host a run was made on, as data (report.json `host`, docs/report-schema.md): the CPUs
it had and the trainer got, the cgroup's CPU quota and memory limit, the load at start, the
kernel, libc, compiler and OpenMP runtime, the trainer's threading variables, the GPU driver
and devices, and hints of a container. `harness diff` compares two of them: "it hangs there,
not here" becomes a list of what differs.

Taken once per run, before the trainer starts, so it must be cheap and must never fail the
run: every file is read bounded (`_read`), every external call goes through `run_tool` with
a short timeout and is cached per process, and a fact that cannot be read is None or "" while
the fingerprint still comes back. Measured on a 2-CPU VM: about 1 ms warm (the compiler
cached), 15-40 ms cold (two or three `cc` calls).

GPU facts come from the NVIDIA kernel module's /proc/driver/nvidia files (driver version,
each GPU's model): they exist wherever the driver is loaded, need no library, and cannot hang.
NVML (doctor/nvml.py) is not called here: its init can hang or crash with a broken driver,
which the doctor isolates in a child interpreter; the harness's own process, about to watch a
trainer, must not take that risk."""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.jsonvalues import Measured
from harness.process.cgroup import CGROUP_ROOT, cpu_quota
from harness.process.tools import find_tool, run_tool

READ_LIMIT = 64 * 1024  # a /proc or /sys file read here: small ones, read to this at most
MOUNTINFO_LIMIT = 1024 * 1024  # a Kubernetes node can list thousands of mounts
TOOL_TIMEOUT_S = 2.0  # `cc --version`: a compiler that takes longer is reported as unknown
MAX_ENV = 64  # threading variables kept (a hostile environment cannot grow the report)
MAX_VALUE = 512  # characters kept of one variable's value
MAX_GPUS = 64
NVIDIA_PROC = "/proc/driver/nvidia"  # the kernel module's own files
MAX_CGROUP_DEPTH = 32  # ancestors walked for the effective quota and memory limit
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number

# the variables of the trainer's environment that size or steer its threads and devices
ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "CUDA_", "NCCL_", "TORCH_")
ENV_NAMES = frozenset(
    {
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "BLIS_NUM_THREADS",
        "GLIBC_TUNABLES",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "MALLOC_ARENA_MAX",
        "PYTHON_CPU_COUNT",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)  # never copied into a report
CONTAINER_ENGINES = ("docker", "kubepods", "containerd", "libpod", "lxc", "podman")


@dataclass
class HostFingerprint:
    """What the host gave a run. None or "" where a fact could not be read; lists are empty
    where there is nothing (no GPU, no container hint)."""

    cpus_online: int | None = None  # CPUs the kernel has online
    cpus_online_list: str = ""  # /sys/devices/system/cpu/online, e.g. "0-7"
    # the CPUs the trainer may run on: the affinity it was given, else the harness's own,
    # which it inherits
    trainer_affinity: list[int] | None = None
    affinity: list[int] | None = None  # the harness's own
    cpu_quota: float | None = None  # CPUs of bandwidth the cgroup grants; None: unlimited
    memory_limit: int | None = None  # bytes the cgroup grants; None: unlimited
    load: list[Measured] | None = None  # load average at start: 1, 5, 15 minutes
    kernel: str = ""  # uname release
    kernel_version: str = ""  # uname version (build date, preemption model)
    machine: str = ""  # uname machine: x86_64, aarch64
    libc: str = ""  # "glibc 2.36"; "" elsewhere (musl answers nothing)
    compiler: str = ""  # first line of `cc --version`; "" when there is no cc
    openmp_runtime: str = ""  # the OpenMP library cc would link, resolved; "" unknown
    env: dict[str, str] = field(default_factory=dict)  # the trainer's threading variables
    gpu_driver: str = ""  # the NVIDIA kernel module's version
    gpus: list[str] = field(default_factory=list)  # each GPU's model, by bus id
    container: list[str] = field(default_factory=list)  # why this looks like a container
    cgroup: str = ""  # the harness's own cgroup path (v2; v1: the cpu controller's)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def take_fingerprint(
    trainer_env: Mapping[str, str], trainer_affinity: Sequence[int] | None = None
) -> HostFingerprint:
    """This host as the trainer will find it: `trainer_env` is its whole environment (its
    PATH and CC choose the compiler asked), `trainer_affinity` the CPUs it was confined to
    (None: it inherits the harness's). Never raises for a fact it cannot read."""
    own = _affinity()
    cgroup_path = _own_cgroup()
    online_list = (_read("/sys/devices/system/cpu/online") or "").strip()
    release, version, machine = _uname()
    compiler, openmp = _toolchain(_cc_name(trainer_env), trainer_env.get("PATH", os.defpath))
    driver, gpus = _gpus()
    return HostFingerprint(
        cpus_online=_count_cpus(online_list) or os.cpu_count(),
        cpus_online_list=online_list,
        trainer_affinity=sorted(set(trainer_affinity)) if trainer_affinity is not None else own,
        affinity=own,
        cpu_quota=_effective(cgroup_path, cpu_quota),
        memory_limit=_memory_limit(cgroup_path),
        load=_load(),
        kernel=release,
        kernel_version=version,
        machine=machine,
        libc=_libc(),
        compiler=compiler,
        openmp_runtime=openmp,
        env=threading_env(trainer_env),
        gpu_driver=driver,
        gpus=gpus,
        container=_container_hints(cgroup_path),
        cgroup=cgroup_path or "",
    )


def threading_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of `env` that size or steer threads and devices, sorted, bounded; none
    whose name looks like a secret."""
    names = sorted(
        k for k in env if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not _SECRET.search(k)
    )
    return {k: env[k][:MAX_VALUE] for k in names[:MAX_ENV]}


# ------------------------------------------------------------------------- reads


def _read(path: str, limit: int = READ_LIMIT) -> str | None:
    """At most `limit` bytes of a file as text; None when it cannot be read. A FIFO or a
    device in place of a /proc file would block or never end: only regular files (and the
    kernel's pseudo-files, which stat as regular) are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _is_regular(fd):
            return None
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _count_cpus(cpu_list: str) -> int | None:
    """The number of CPUs in a kernel CPU list ("0-3,8,10-11"); None when it is not one."""
    total = 0
    for part in filter(None, cpu_list.split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        total += int(hi or lo) - int(lo) + 1
    return total or None


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _uname() -> tuple[str, str, str]:
    u = os.uname()
    return u.release, u.version, u.machine


def _libc() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # the name is unknown where the libc is not glibc
        return ""


# ------------------------------------------------------------------------- cgroup


def _own_cgroup() -> str | None:
    """This process's cgroup path: the v2 line (`0::/path`), else the v1 cpu controller's."""
    text = _read("/proc/self/cgroup") or ""
    v1 = None
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and not controllers:
            return path
        if "cpu" in controllers.split(","):
            v1 = path
    return v1


def _memory_at(folder: str) -> float | None:
    for name in ("memory.max", "memory/memory.limit_in_bytes", "memory.limit_in_bytes"):
        text = (_read(f"{folder}/{name}") or "").strip()
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            return int(text)
    return None


def _effective(cgroup_path: str | None, read: Callable[[str], float | None]) -> float | None:
    """The tightest limit on the way from this process's cgroup (v2: its folder under
    /sys/fs/cgroup, when the namespace shows it) up to the root: a parent's limit binds its
    children. The root alone where the own folder is not there (cgroup v1, a namespace)."""
    folders: list[str] = []
    if cgroup_path and cgroup_path.startswith("/"):
        parts = [p for p in cgroup_path.split("/") if p and p != ".."]
        for depth in range(min(len(parts), MAX_CGROUP_DEPTH), 0, -1):
            folder = os.path.join(CGROUP_ROOT, *parts[:depth])
            if os.path.isdir(folder):
                folders.append(folder)
    folders.append(CGROUP_ROOT)
    found = [v for v in (read(f) for f in folders) if v is not None]
    return min(found) if found else None


def _memory_limit(cgroup_path: str | None) -> int | None:
    limit = _effective(cgroup_path, _memory_at)
    return int(limit) if limit is not None else None


# ------------------------------------------------------------------------- toolchain


def _cc_name(env: Mapping[str, str]) -> str:
    """The C compiler the trainer's build would call: the first word of CC, else cc."""
    words = env.get("CC", "").split()
    return words[0] if words else "cc"


@functools.lru_cache(maxsize=8)
def _toolchain(cc: str, path: str) -> tuple[str, str]:
    """(first line of `cc --version`, the OpenMP runtime it links), cached per process: the
    compiler does not change during a run, and a repeat takes one fingerprint a run."""
    exe = find_tool(cc, path=path) if "/" not in cc else cc
    if exe is None or not os.access(exe, os.X_OK):
        return "", ""
    res = run_tool([exe, "--version"], TOOL_TIMEOUT_S, env={**os.environ, "LC_ALL": "C"})
    if res.returncode != 0:
        return "", ""
    lines = res.stdout.strip().splitlines()
    return (lines[0][:MAX_VALUE] if lines else ""), _openmp_runtime(exe)


def _openmp_runtime(exe: str) -> str:
    """The OpenMP library `exe -fopenmp` would link: GCC's libgomp, else LLVM's libomp, as
    the compiler finds it (`-print-file-name`), links resolved; "" when it names none."""
    for lib in ("libgomp.so", "libomp.so"):
        res = run_tool([exe, f"-print-file-name={lib}"], TOOL_TIMEOUT_S)
        found = res.stdout.strip()
        # the bare name back means the compiler has no such file
        if res.returncode == 0 and found.startswith("/") and os.path.exists(found):
            return os.path.realpath(found)
    return ""


# ------------------------------------------------------------------------- GPUs


def _gpus(root: str = NVIDIA_PROC) -> tuple[str, list[str]]:
    """(the NVIDIA driver's version, each GPU's model), or ("", []) without the driver. The
    proprietary module says `Kernel Module  550.54.15`, the open one `Open Kernel Module for
    x86_64  550.54.15`."""
    text = _read(f"{root}/version") or ""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d[\w.-]*)", text)
    driver = match.group(1) if match else ""
    models: list[str] = []
    try:
        buses = sorted(os.listdir(f"{root}/gpus"))[:MAX_GPUS]
    except OSError:
        buses = []
    for bus in buses:
        info = _read(f"{root}/gpus/{bus}/information") or ""
        model = re.search(r"^Model:\s*(.+)$", info, re.MULTILINE)
        models.append(model.group(1).strip()[:MAX_VALUE] if model else "?")
    return driver, models


# ------------------------------------------------------------------------- container


def _container_hints(cgroup_path: str | None) -> list[str]:
    """Why this looks like a container: the engines' marker files, the `container` variable
    of PID 1 (systemd-nspawn, podman; readable only with rights over PID 1) or our own, an
    engine's name in our cgroup path, an overlay file system at /."""
    hints = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    pid1 = _read("/proc/1/environ") or ""
    engine = next((v[10:] for v in pid1.split("\0") if v.startswith("container=")), "")
    engine = engine or os.environ.get("container", "")  # noqa: SIM112  (lowercase by convention)
    if engine:
        hints.append(f"container={engine[:64]}")
    low = (cgroup_path or "").lower()
    hints += [f"cgroup {e}" for e in CONTAINER_ENGINES if e in low]
    if _root_fs_type() == "overlay":
        hints.append("overlay root")
    return hints


def _root_fs_type() -> str:
    """The file system type of / from /proc/self/mountinfo (`… / / … - overlay …`)."""
    found = ""
    for line in (_read("/proc/self/mountinfo", MOUNTINFO_LIMIT) or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if sep and len(fields) >= 5 and fields[4] == "/":
            found = tail.split(" ", 1)[0]  # the last mount at / is the one seen
    return found


# ------------------------------------------------------------------------- compared

# the fields in the order a reader should check them: what the trainer's threads were given
# first (a pool sized from one CPU count waiting on a barrier sized from another), then the
# limits, the software, the devices, the container
ORDER = (
    "trainer_affinity",
    "affinity",
    "cpus_online",
    "cpu_quota",
    "memory_limit",
    "env",
    "openmp_runtime",
    "compiler",
    "libc",
    "kernel",
    "kernel_version",
    "machine",
    "gpu_driver",
    "gpus",
    "container",
    "cgroup",
    "cpus_online_list",
    "load",
)
LOAD_DIFFERS = 1.0  # 1-minute load averages closer than this are the same host's noise


def compare_fingerprints(a: HostFingerprint, b: HostFingerprint) -> list[tuple[str, str, str]]:
    """(field, A's value, B's value) for each fact that differs, in `ORDER`; each variable
    of `env` its own row (`env.OMP_NUM_THREADS`)."""
    rows: list[tuple[str, str, str]] = []
    for name in ORDER:
        va, vb = getattr(a, name), getattr(b, name)
        if name == "env":
            for key in sorted(set(va) | set(vb)):
                if va.get(key) != vb.get(key):
                    rows.append((f"env.{key}", va.get(key, ""), vb.get(key, "")))
        elif name == "load":
            if (va and vb and abs(va[0] - vb[0]) >= LOAD_DIFFERS) or bool(va) != bool(vb):
                rows.append((name, shown(va), shown(vb)))
        elif va != vb:
            rows.append((name, shown(va), shown(vb)))
    return rows


def shown(value: object) -> str:
    """A fact as text: a CPU list as ranges ("0-3,8"), a list joined, None as ""."""
    if value is None:
        return ""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return cpu_ranges(value)
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def cpu_ranges(cpus: Sequence[int]) -> str:
    """[0, 1, 2, 3, 8] → "0-3,8" (the kernel's own CPU list form)."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in runs)
