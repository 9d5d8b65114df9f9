"""Tool probes: is each tool the harness shells out to on PATH, and what version; for gcc,
does -fopenmp actually link (libgomp present). The stack tools and their hints come from the
sampler's registry (harness/sampling/tools.py), in its order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.doctor.model import Probe, ProbeContext, c_source, tempdir, why
from harness.sampling import tools as stack_tools
from harness.sampling.tools import StackTool
from harness.vocab import DoctorStatus, StackToolKind


@dataclass(frozen=True)
class Tool:
    name: str
    missing: DoctorStatus  # status when absent
    hint: str
    marker: str = ""  # the version line contains this (nvcc prints a banner first)
    stack: StackTool | None = None  # a stack tool: its hints come from the registry


def _stack_tool(tool: StackTool) -> Tool:
    return Tool(tool.name.value, DoctorStatus.WARN, stack_role(tool), stack=tool)


def stack_role(tool: StackTool) -> str:
    """How to install a stack tool and its place in the sampler's order of preference."""
    same = stack_tools.of_kind(tool.kind)
    before = " and ".join(t.name for t in same[: same.index(tool)])
    place = f"the fallback after {before}" if before else f"the first {_KIND[tool.kind]} stack tool"
    return f"{tool.install}: {place} ({tool.cost})"


def stack_hint(tool: StackTool, present: Sequence[str]) -> str:
    """A missing stack tool: `stack_role`, and what the sampler does without it, given the
    stack tools on PATH (`present`)."""
    same = stack_tools.of_kind(tool.kind)
    others = [t.name.value for t in same if t is not tool and t.name in present]
    kind = _KIND[tool.kind]
    if others:
        meanwhile = f"{kind} stacks come from {' then '.join(others)} alone"
    else:
        names = ", ".join(t.name for t in same if t is not tool)
        also = f" ({names} missing too)" if names else ""
        meanwhile = f"samples have no {kind} stacks{also}"
    return f"{stack_role(tool)}; meanwhile {meanwhile}"


_KIND = {StackToolKind.NATIVE: "native", StackToolKind.PYTHON: "Python"}


TOOLS = (
    Tool(
        "gcc",
        DoctorStatus.FAIL,
        "install gcc with libgomp: the replica and 5.0 build with -fopenmp",
    ),
    # the stack tools in the sampler's order of preference (harness/sampling/tools.py)
    *(_stack_tool(t) for t in stack_tools.TOOLS),
    Tool("git", DoctorStatus.WARN, "install git: pins, upstream checkouts and bisect need it"),
    Tool("ccache", DoctorStatus.WARN, "install ccache: the 5.0 build.sh requires it"),
    Tool("nvcc", DoctorStatus.WARN, "needed only to build the 5.0 pin (CUDA toolkit)", "release"),
)


def probe_tool(tool: Tool, ctx: ProbeContext) -> Probe:
    exe = ctx.which(tool.name)
    if exe is None:
        return Probe("", tool.missing, f"{tool.name} not found on PATH", _missing_hint(tool, ctx))
    res = ctx.run([exe, "--version"])
    if res.returncode != 0:
        return Probe("", DoctorStatus.WARN, f"{exe} --version failed: {why(res)}", tool.hint)
    detail = f"{version_line(res.stdout + res.stderr, tool.marker)} ({exe})"
    if tool.name == "gcc":
        return _check_gomp_links(exe, detail, ctx)
    return Probe("", DoctorStatus.OK, detail)


def _missing_hint(tool: Tool, ctx: ProbeContext) -> str:
    if tool.stack is None:
        return tool.hint
    present = [t.name.value for t in stack_tools.TOOLS if ctx.which(t.name) is not None]
    return stack_hint(tool.stack, present)


def version_line(text: str, marker: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = [ln for ln in lines if marker in ln] if marker else lines
    return (picked or lines or ["(no version output)"])[0][:120]


def _check_gomp_links(gcc: str, detail: str, ctx: ProbeContext) -> Probe:
    """A gcc without libgomp compiles the replica's pragmas away or fails at link time."""
    with tempdir() as tmp:
        src = tmp / "empty.c"
        src.write_text(c_source("gomp_links.c"))
        res = ctx.run([gcc, "-fopenmp", str(src), "-o", str(tmp / "empty")])
    if res.returncode != 0:
        why_not = f"gcc -fopenmp does not link: {why(res)}"
        return Probe(
            "",
            DoctorStatus.FAIL,
            f"{detail}; {why_not}",
            "install libgomp (e.g. apt-get install gcc)",
        )
    return Probe("", DoctorStatus.OK, f"{detail}; -fopenmp links")
