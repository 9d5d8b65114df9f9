"""Host probe: CPUs (affinity, cgroup quota), cgroup memory limit, and container markers;
it only reads files and the environment."""

from __future__ import annotations

import os

from harness.doctor.model import Probe, ProbeContext
from harness.files import read_text
from harness.process.cgroup import cpu_quota
from harness.vocab import DoctorStatus

_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge page-aligned number


def probe_cpu(ctx: ProbeContext) -> Probe:
    del ctx  # reads files only
    cpus = os.cpu_count() or 0
    affinity = len(os.sched_getaffinity(0))
    quota = cpu_quota()
    effective = min(affinity, quota) if quota else affinity
    quota_text = f"cgroup cpu quota {quota:g}" if quota else "no cgroup cpu quota"
    detail = (
        f"{cpus} CPUs, {affinity} usable ({quota_text}); memory {_memory_limit()}; "
        f"container: {_container() or 'none detected'}"
    )
    if effective < 2:
        hint = "the 5.0 workers busy-spin without yielding: on < 2 CPUs a run crawls like a hang"
        return Probe("", DoctorStatus.WARN, detail, hint)
    return Probe("", DoctorStatus.OK, detail)


def _memory_limit() -> str:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (read_text(path) or "").strip()
        if text.isdigit() and int(text) < _UNLIMITED:
            return f"limit {int(text) / 2**30:.1f} GiB"
    return "no cgroup limit"


def _container() -> str:
    marks = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    # systemd-nspawn and podman announce themselves in a lowercase `container` variable
    engine = os.environ.get("container")  # noqa: SIM112
    if engine:
        marks.append(f"container={engine}")
    cgroup = read_text("/proc/1/cgroup") or ""
    engines = ("docker", "kubepods", "containerd", "libpod", "lxc")
    marks += [f"cgroup {e}" for e in engines if e in cgroup]
    return ", ".join(marks)
