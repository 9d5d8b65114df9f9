"""Tool probes: is each tool the harness shells out to on PATH, and what version; for gcc,
does -fopenmp actually link (libgomp present)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.doctor.model import Probe, ProbeContext, c_source, tempdir, why


@dataclass(frozen=True)
class Tool:
    name: str
    missing: str  # status when absent
    hint: str
    marker: str = ""  # the version line contains this (nvcc prints a banner first)


TOOLS = (
    Tool("gcc", "fail", "install gcc with libgomp: the replica and 5.0 build with -fopenmp"),
    Tool(
        "gdb",
        "warn",
        "native stacks degrade to eu-stack (no arguments, fewer names); install gdb",
    ),
    Tool("eu-stack", "warn", "install elfutils: the fallback when gdb cannot unwind"),
    Tool("py-spy", "warn", "pip install py-spy: Python trainers (3.0.0) get no Python stacks"),
    Tool("git", "warn", "install git: pins, upstream checkouts and bisect need it"),
    Tool("ccache", "warn", "install ccache: the 5.0 build.sh requires it"),
    Tool("nvcc", "warn", "needed only to build the 5.0 pin (CUDA toolkit)", "release"),
)


def probe_tool(tool: Tool, ctx: ProbeContext) -> Probe:
    exe = ctx.which(tool.name)
    if exe is None:
        return Probe("", tool.missing, f"{tool.name} not found on PATH", _missing_hint(tool, ctx))
    res = ctx.run([exe, "--version"])
    if res.returncode != 0:
        return Probe("", "warn", f"{exe} --version failed: {why(res)}", tool.hint)
    detail = f"{version_line(res.stdout + res.stderr, tool.marker)} ({exe})"
    if tool.name == "gcc":
        return _check_gomp_links(exe, detail, ctx)
    return Probe("", "ok", detail)


def _missing_hint(tool: Tool, ctx: ProbeContext) -> str:
    if tool.name == "gdb" and ctx.which("eu-stack") is None:
        return "eu-stack is missing too: samples will have no native stacks; install gdb"
    return tool.hint


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
            "", "fail", f"{detail}; {why_not}", "install libgomp (e.g. apt-get install gcc)"
        )
    return Probe("", "ok", f"{detail}; -fopenmp links")
