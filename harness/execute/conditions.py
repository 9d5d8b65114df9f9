"""Host conditions a run is made under: the CPUs the trainer's tree may use, a CPU quota, a
memory limit, a noisy neighbour, environment presets (docs/hosts.md).

What is asked (`HostConditions`, from `--cpus`/`--cpu-quota`/`--memory`/`--load` and a
`--host` profile) and how this host gives it (`prepare` → `Applied`): the CPUs and an
address-space limit are set by the reaper's exec wrapper in the trainer itself before it
execs (every thread and child inherits them; no privilege needed); a CPU quota and a cgroup
memory limit need a cgroup v2 leaf this process may create (a delegated or writable cgroup),
else a quota goes through `systemd-run --user --scope`, else the run is refused with one line
that says what this host lacks. The noisy neighbour is harness.execute.load."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.config.hostprofile import (
    HostProfile,
    format_cpus,
    format_size,
    load_host,
    parse_cpus,
)
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.process.tools import find_tool, run_tool

LEAF_PREFIX = "puffer-harness-"
PERIOD_US = 100_000  # cpu.max's period: the kernel's default
PROBE_TIMEOUT_S = 5.0


def allowed_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity: a cpuset or taskset narrows it)."""
    return tuple(sorted(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class HostConditions:
    """What `--cpus`, `--cpu-quota`, `--memory`, `--load` and a `--host` profile ask for.
    Empty (the default): the run is made on the host as it is."""

    cpus: tuple[int, ...] | None = None  # the affinity of the whole tree; None: as inherited
    cpu_quota: float | None = None  # CPUs of bandwidth (cgroup v2 cpu.max), e.g. 0.5
    memory_bytes: int | None = None  # the tree's memory limit (cgroup memory.max or rlimit)
    load: int = 0  # busy threads of the harness's own on the same CPUs (a noisy neighbour)
    env: dict[str, str] = field(default_factory=dict)  # presets added to the trainer's env
    profile: str | None = None  # the hosts/*.toml profile these came from, if any

    @property
    def empty(self) -> bool:
        return (
            self.cpus is None
            and self.cpu_quota is None
            and self.memory_bytes is None
            and not self.load
            and not self.env
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cpus": list(self.cpus) if self.cpus is not None else None,
            "cpu_quota": self.cpu_quota,
            "memory_bytes": self.memory_bytes,
            "load": self.load,
            "env": dict(self.env),
            "profile": self.profile,
        }

    @classmethod
    def from_profile(cls, profile: HostProfile) -> HostConditions:
        return cls(
            cpus=None
            if profile.cpus is None
            else resolve_cpus(profile.cpus, f"--host {profile.name}"),
            cpu_quota=profile.cpu_quota,
            memory_bytes=profile.memory_bytes,
            load=profile.load,
            env=dict(profile.env),
            profile=profile.name,
        )

    def overridden(
        self,
        *,
        cpus: tuple[int, ...] | None = None,
        cpu_quota: float | None = None,
        memory_bytes: int | None = None,
        load: int | None = None,
        env: dict[str, str] | None = None,
    ) -> HostConditions:
        """These conditions with each value that is given (not None) replacing its own:
        explicit flags over a profile. `env` adds to (and wins over) the presets."""
        return replace(
            self,
            cpus=self.cpus if cpus is None else cpus,
            cpu_quota=self.cpu_quota if cpu_quota is None else cpu_quota,
            memory_bytes=self.memory_bytes if memory_bytes is None else memory_bytes,
            load=self.load if load is None else load,
            env={**self.env, **(env or {})},
        )

    def merged(self, explicit: HostConditions) -> HostConditions:
        """A profile (`self`) with `explicit` conditions over it (explicit wins; an explicit
        `load` of 0 cannot be told from none: use `overridden(load=0)` for that)."""
        return self.overridden(
            cpus=explicit.cpus,
            cpu_quota=explicit.cpu_quota,
            memory_bytes=explicit.memory_bytes,
            load=explicit.load or None,
            env=explicit.env,
        )

    def flags(self) -> list[str]:
        """The command-line flags that recreate these conditions in a child harness (a
        sweep cell, a repeated run): the profile (its env presets), then each value that
        differs from the profile's. A later `--host` on the same line (a sweep's host axis)
        then replaces the profile and keeps only the explicit values."""
        base = HostConditions()
        flags: list[str] = []
        if self.profile:
            flags += ["--host", self.profile]
            base = HostConditions.from_profile(load_host(self.profile))
        if self.cpus is not None and self.cpus != base.cpus:
            first = allowed_cpus()[: len(self.cpus)]
            # the first N of ours: a count, which means the same on a host numbered otherwise
            count = first == self.cpus
            flags += ["--cpus", str(len(self.cpus)) if count else format_cpus(self.cpus)]
        if self.cpu_quota is not None and self.cpu_quota != base.cpu_quota:
            flags += ["--cpu-quota", repr(self.cpu_quota)]
        if self.memory_bytes is not None and self.memory_bytes != base.memory_bytes:
            flags += ["--memory", str(self.memory_bytes)]
        if self.load != base.load:  # `--load 0` undoes a profile's load
            flags += ["--load", str(self.load)]
        return flags

    def describe(self) -> str:
        """One line for a summary: `cpus 0, quota 0.5 CPU, memory 512 MiB, load 1`."""
        parts = [] if self.profile is None else [f"host {self.profile}"]
        if self.cpus is not None:
            parts.append(f"cpus {show_cpus(self.cpus)}")
        if self.cpu_quota is not None:
            parts.append(f"cpu quota {self.cpu_quota:g} CPU")
        if self.memory_bytes is not None:
            parts.append(f"memory {format_size(self.memory_bytes)}")
        if self.load:
            parts.append(f"load {self.load}")
        parts += [f"env {k}={v}" for k, v in self.env.items()]
        return ", ".join(parts) or "as the host is"


def show_cpus(cpus: tuple[int, ...]) -> str:
    """CPUs for a reader: `0`, `0-1,3` (format_cpus writes one CPU as `0-0` for a flag)."""
    return str(cpus[0]) if len(cpus) == 1 else format_cpus(cpus)


def resolve_cpus(spec: int | tuple[int, ...] | str, what: str = "--cpus") -> tuple[int, ...]:
    """A count → the first N CPUs this process may use; a list → itself, if this process
    may use every CPU of it. One-line usage error otherwise."""
    if isinstance(spec, str):
        try:
            spec = parse_cpus(spec)
        except ValueError as exc:
            raise HarnessError(f"{what}: {exc}", USAGE) from None
    allowed = allowed_cpus()
    if isinstance(spec, int):
        if spec > len(allowed):
            raise HarnessError(
                f"{what} {spec}: this process may use only {len(allowed)} CPU(s) "
                f"({format_cpus(allowed)})",
                USAGE,
            )
        return allowed[:spec]
    outside = sorted(set(spec) - set(allowed))
    if outside or not spec:
        raise HarnessError(
            f"{what} {format_cpus(spec) if spec else '(none)'}: CPU {show_cpus(tuple(outside))} "
            f"is not among the CPUs this process may use ({format_cpus(allowed)})",
            USAGE,
        )
    return tuple(spec)


# ---------------------------------------------------------------- how this host gives them


@dataclass(frozen=True)
class CgroupV2:
    """This process's cgroup v2 folder and the controllers a leaf under it can use."""

    path: Path
    controllers: frozenset[str]  # enabled for its children (cgroup.subtree_control)
    reason: str = ""  # why none can be used at all (no cgroup v2, not writable), in words

    def why(self, *names: str) -> str:
        """Why `names` cannot be used here ("" when they can), in words."""
        missing = [n for n in names if n not in self.controllers]
        if not missing:
            return ""
        many = "s" if len(missing) > 1 else ""
        return (
            self.reason
            or f"{self.path} does not delegate the {' and '.join(missing)} controller{many}"
        )


def _own_v2() -> tuple[Path | None, str]:
    """The folder of this process's cgroup on the cgroup2 mount, or why there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self/cgroup: {exc.strerror}"
    rel = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    for line in mounts:
        pre, _, post = line.partition(" - ")
        if rel is not None and post.split()[:1] == ["cgroup2"]:
            root, point = pre.split()[3:5]
            inner = os.path.relpath(rel, root) if rel.startswith(root) else None
            if inner is not None and not inner.startswith(".."):
                return Path(point, inner).resolve(), ""
    return None, "no cgroup v2 hierarchy holds this process"


@functools.cache
def cgroup_v2() -> CgroupV2:
    """Where a leaf cgroup can be made for the trainer (cpu, memory), if anywhere."""
    path, why = _own_v2()
    if path is None:
        return CgroupV2(Path("/"), frozenset(), why)
    if not os.access(path, os.W_OK) or not os.access(path / "cgroup.procs", os.W_OK):
        return CgroupV2(path, frozenset(), f"{path} is not writable (not delegated)")
    try:
        available = set((path / "cgroup.controllers").read_text().split())
        enabled = set((path / "cgroup.subtree_control").read_text().split())
    except OSError as exc:
        return CgroupV2(path, frozenset(), f"cannot read {path}: {exc.strerror}")
    for name in sorted({"cpu", "memory"} & available - enabled):
        # a delegated cgroup that holds no process itself can enable them for its children;
        # one that holds processes cannot (EBUSY: the "no internal processes" rule)
        with contextlib.suppress(OSError):
            (path / "cgroup.subtree_control").write_text(f"+{name}")
            enabled.add(name)
    return CgroupV2(path, frozenset(enabled & {"cpu", "memory"}))


@functools.cache
def systemd_scope() -> str:
    """ "" when `systemd-run --user --scope` can set a CPU quota here, else why not."""
    tool = find_tool("systemd-run")
    if tool is None:
        return "systemd-run is not installed"
    probe = [tool, "--user", "--scope", "--quiet", "-p", "CPUQuota=50%", "--", "true"]
    res = run_tool(probe, PROBE_TIMEOUT_S)
    if res.returncode == 0:
        return ""
    first = (res.output.strip().splitlines() or [res.error or "no output"])[0]
    return f"systemd-run --user --scope failed: {first[:120]}"


def check_available(cond: HostConditions) -> None:
    """A condition this host cannot give: one line now, before anything is built or run."""
    if cond.cpus is not None:
        resolve_cpus(cond.cpus)
    if cond.cpu_quota is None:
        return
    cg = cgroup_v2()
    if "cpu" in cg.controllers:
        return
    why_scope = systemd_scope()
    if why_scope:
        why_cg = cg.why("cpu")
        raise HarnessError(
            "--cpu-quota needs a writable cgroup v2 with the cpu controller delegated or "
            f"systemd-run --user; this host has neither ({why_cg}; {why_scope})",
            USAGE,
        )


@dataclass
class Applied:
    """How the conditions are given to this run: options for the reaper's exec wrapper, a
    command prefix (systemd-run), a leaf cgroup to remove afterwards, and one line each."""

    wrapper: list[str] = field(default_factory=list)  # KEY=VALUE for reaper.pdeathsig_argv
    prefix: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    leaf: Path | None = None

    def cleanup(self) -> None:
        """Remove the leaf cgroup (the tree in it is dead and reaped; a moment for the
        kernel to notice)."""
        if self.leaf is None:
            return
        for _ in range(50):
            try:
                self.leaf.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)
        self.leaf = None


def _make_leaf(parent: Path) -> Path:
    # leaves left by a harness that was SIGKILLed (empty once its tree died): removed now
    for stale in parent.glob(f"{LEAF_PREFIX}*"):
        pid = stale.name.removeprefix(LEAF_PREFIX).partition("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                stale.rmdir()
    leaf = parent / f"{LEAF_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    try:
        leaf.mkdir()
    except OSError as exc:
        raise HarnessError(f"cannot create the cgroup {leaf}: {exc.strerror}", USAGE) from None
    return leaf


def prepare(cond: HostConditions) -> Applied:
    """Make what the conditions need (a leaf cgroup) and say how each is applied. The
    caller runs `cleanup()` on every path."""
    applied = Applied(lines=[f"env {k}={v} (preset)" for k, v in cond.env.items()])
    if cond.cpus is not None:
        cpus = show_cpus(resolve_cpus(cond.cpus))
        applied.wrapper.append(f"cpus={cpus}")
        applied.lines.append(
            f"cpus {cpus} (sched_setaffinity in the trainer before exec, inherited)"
        )
    check_available(cond)
    if cond.cpu_quota is None and cond.memory_bytes is None:
        return applied
    cg = cgroup_v2()
    quota_cg = cond.cpu_quota is not None and "cpu" in cg.controllers
    memory_cg = cond.memory_bytes is not None and "memory" in cg.controllers
    if quota_cg or memory_cg:
        _fill_leaf(applied, _make_leaf(cg.path), cond, quota_cg, memory_cg)
    if cond.cpu_quota is not None and not quota_cg:  # check_available: systemd-run works here
        pct = f"{cond.cpu_quota * 100:g}%"
        tool = find_tool("systemd-run") or "systemd-run"
        applied.prefix = [tool, "--user", "--scope", "--quiet", "-p", f"CPUQuota={pct}", "--"]
        applied.lines.append(
            f"cpu quota {cond.cpu_quota:g} CPU (systemd-run --user --scope CPUQuota={pct})"
        )
    if cond.memory_bytes is not None and not memory_cg:
        applied.wrapper.append(f"as={cond.memory_bytes}")
        applied.lines.append(
            f"memory {format_size(cond.memory_bytes)} (RLIMIT_AS of each process of the tree, "
            f"not of the tree together: {cg.why('memory')})"
        )
    return applied


def _fill_leaf(applied: Applied, leaf: Path, cond: HostConditions, cpu: bool, memory: bool) -> None:
    applied.leaf = leaf
    try:
        if cpu and cond.cpu_quota is not None:
            value = f"{round(cond.cpu_quota * PERIOD_US)} {PERIOD_US}"
            (leaf / "cpu.max").write_text(value)
            applied.lines.append(f"cpu quota {cond.cpu_quota:g} CPU (cgroup v2 cpu.max {value})")
        if memory and cond.memory_bytes is not None:
            (leaf / "memory.max").write_text(str(cond.memory_bytes))
            with contextlib.suppress(OSError):  # no swap: the limit is the limit
                (leaf / "memory.swap.max").write_text("0")
            applied.lines.append(f"memory {format_size(cond.memory_bytes)} (cgroup v2 memory.max)")
    except OSError as exc:
        applied.cleanup()
        raise HarnessError(f"cannot set a limit in {leaf}: {exc.strerror}", USAGE) from None
    applied.wrapper.append(f"cgroup={leaf}")
    applied.lines.append(f"cgroup {leaf} (joined by the trainer before exec, inherited)")
