"""Platform probes: can this machine build and run the trainer, and can the harness see
inside a hang here (OpenMP, the libgomp fork hazard, ptrace, py-spy, NVML, CUDA, cgroups)?
With torch installed (the `gpu` extra), the `gpu:*` probes also exercise the device.

Every probe is bounded by a timeout and guarded: one that fails or raises never stops the
others. Every external command goes through `process.tools.run_tool` (own session, hard
timeout, whole group killed); the few long-lived targets we start ourselves (a process to
attach to) through `process.tools.started`, which kills and reaps them however a probe ends.

Layout: `model` (Probe, ProbeContext, statuses, the guard), one module per topic
(`tools`, `openmp`, `tracing`, `gpu`, `torchgpu`, `host`), `nvml` (the one NVML reader, for
`gpu` and `torchgpu`), and `render` (table, JSON, exit code). The stack tools probed, and
their hints, come from the sampler's registry (harness/sampling/tools.py).
The C programs the OpenMP probes compile live in harness/data/doctor/.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.doctor import gpu, host, openmp, tools, torchgpu, tracing
from harness.doctor.gpu import NO_GPU, NO_NVML, nvml_report
from harness.doctor.model import SCHEMA, STATUSES, Probe, ProbeContext, ProbeFn, guarded
from harness.doctor.openmp import FORK_HAZARD, FORK_LIMIT_S
from harness.doctor.render import counts, exit_code, render, to_json
from harness.doctor.tracing import PTRACE_HINT

if TYPE_CHECKING:
    import argparse

__all__ = [
    "FORK_HAZARD",
    "FORK_LIMIT_S",
    "NO_GPU",
    "NO_NVML",
    "PTRACE_HINT",
    "SCHEMA",
    "STATUSES",
    "Probe",
    "ProbeContext",
    "counts",
    "exit_code",
    "main",
    "nvml_report",
    "probe_names",
    "render",
    "run_doctor",
    "run_probes",
    "to_json",
]


def run_doctor(timeout_s: float = 10.0, *, path: str | None = None) -> list[Probe]:
    """Run every probe in order; `path` replaces PATH for finding tools (tests use it)."""
    ctx = ProbeContext.make(timeout_s, path)
    return [guarded(name, fn, ctx) for name, fn in _probes()]


def run_probes(names: Sequence[str], timeout_s: float) -> list[Probe]:
    """The named probes only (a cause rule's `doctor`), in the order given; a name that is
    not a probe is a ValueError that lists the known ones."""
    known = dict(_probes())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no doctor probe {unknown[0]!r} (known: {', '.join(known)})")
    ctx = ProbeContext.make(timeout_s, None)
    return [guarded(name, known[name], ctx) for name in names]


def probe_names() -> list[str]:
    return [name for name, _ in _probes()]


def _probes() -> list[tuple[str, ProbeFn]]:
    # looked up on their modules at each run, so a test can replace one probe
    by_tool = [(f"tool:{t.name}", functools.partial(tools.probe_tool, t)) for t in tools.TOOLS]
    return [
        *by_tool,
        ("openmp", openmp.probe_openmp),
        ("openmp-after-fork", openmp.probe_openmp_fork),
        ("ptrace", tracing.probe_ptrace),
        ("py-spy", tracing.probe_py_spy),
        ("nvml", gpu.probe_nvml),
        ("cuda", gpu.probe_cuda),
        *torchgpu.probes(),  # gpu:*, each check in its own child under its own timeout
        ("cpu/container", host.probe_cpu),
    ]


def main(args: argparse.Namespace) -> int:
    """`harness doctor [--json] [--timeout S]`: 1 when any probe fails, else 0."""
    timeout = getattr(args, "timeout", None) or 10.0
    probes = run_doctor(float(timeout))
    if getattr(args, "json", False):
        print(json.dumps(to_json(probes), indent=2))
    else:
        print(render(probes), end="")
    return exit_code(probes)
