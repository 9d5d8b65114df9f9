"""What the cgroup grants this process: read by the doctor (a fact to report) and by the
sampler (how many stack tools to run at once)."""

from __future__ import annotations

from harness.files import read_text

CGROUP_ROOT = "/sys/fs/cgroup"


def cpu_quota(root: str = CGROUP_ROOT) -> float | None:
    """CPUs granted by the cgroup (v2 cpu.max, else v1 cfs quota); None when unlimited or
    unreadable."""
    v2 = (read_text(f"{root}/cpu.max") or "").split()
    if len(v2) == 2 and v2[0] != "max" and v2[0].isdigit() and v2[1].isdigit() and int(v2[1]):
        return int(v2[0]) / int(v2[1])
    for base in (f"{root}/cpu", f"{root}/cpu,cpuacct"):
        quota = (read_text(f"{base}/cpu.cfs_quota_us") or "").strip()
        period = (read_text(f"{base}/cpu.cfs_period_us") or "").strip()
        if quota.isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
            return int(quota) / int(period)
    return None
