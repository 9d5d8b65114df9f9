"""The host-conditions option group (`--host`, `--cpus`, `--cpu-quota`, `--memory`,
`--load`), defined once, and its one translation into `HostConditions` (docs/hosts.md)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

# the host profiles (pydantic) and the conditions are imported where a value is parsed or
# the conditions are made, not when the parser is built (harness.cli.options says why)
if TYPE_CHECKING:
    from harness.execute.conditions import HostConditions


def _cpus(text: str) -> int | tuple[int, ...]:
    from harness.config.hostprofile import parse_cpus

    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quota(text: str) -> float:
    from harness.config.hostprofile import MAX_QUOTA

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of CPUs: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_QUOTA:
        raise argparse.ArgumentTypeError(f"must be > 0 and <= {MAX_QUOTA:g} CPUs, got {text}")
    return value


def _size(text: str) -> int:
    from harness.config.hostprofile import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load(text: str) -> int:
    from harness.config.hostprofile import MAX_LOAD

    if not text.isdigit() or int(text) > MAX_LOAD:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {MAX_LOAD}, got {text}")
    return int(text)


def add_host_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("host conditions (docs/hosts.md)")
    g.add_argument(
        "--host",
        metavar="NAME",
        help="a host profile, hosts/NAME.toml (e.g. container-1cpu); the flags below override it",
    )
    g.add_argument(
        "--cpus",
        type=_cpus,
        metavar="N|LIST",
        help="the CPUs of the trainer's whole tree: N (the first N this process may use) or a "
        "list, e.g. 0,2-3 (a one-CPU list: 1-1)",
    )
    g.add_argument(
        "--cpu-quota",
        type=_quota,
        metavar="CPUS",
        help="CPU bandwidth of the tree, e.g. 0.5 (a cgroup v2 cpu.max, or systemd-run --user)",
    )
    g.add_argument(
        "--memory",
        type=_size,
        metavar="SIZE",
        help="memory limit of the tree, e.g. 512M (cgroup memory.max, else RLIMIT_AS)",
    )
    g.add_argument(
        "--load",
        type=_load,
        metavar="K",
        help="a noisy neighbour: K busy processes on the trainer's CPUs during the run",
    )


def host_conditions(args: argparse.Namespace) -> HostConditions:
    """The profile named by --host (if any) with the explicit flags over it; a CPU set this
    process may not use is a one-line usage error. A parser without the group: empty."""
    from harness.config.hostprofile import load_host
    from harness.execute.conditions import HostConditions, resolve_cpus

    name = getattr(args, "host", None)
    base = HostConditions.from_profile(load_host(name)) if name else HostConditions()
    cpus = getattr(args, "cpus", None)
    return base.overridden(
        cpus=None if cpus is None else resolve_cpus(cpus),
        cpu_quota=getattr(args, "cpu_quota", None),
        memory_bytes=getattr(args, "memory", None),
        load=getattr(args, "load", None),
    )
