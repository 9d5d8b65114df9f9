"""stacks.txt: every stack taken, innermost frame first, `[own]` on the program's frames."""

from __future__ import annotations

from harness.sampling.model import SampleSet


def render_stacks(samples: SampleSet) -> str:
    out: list[str] = []
    for st in samples.stacks:
        out.append(f"== pid {st.pid} tid {st.tid} '{st.name}' ({st.source})")
        for i, f in enumerate(st.frames):
            where = f.file or f.module or ""
            if f.file and f.line:
                where = f"{f.file}:{f.line}"
            own = " [own]" if f.own else ""
            out.append(f"  #{i:<2} {f.function}{'  ' + where if where else ''}{own}")
        out.append("")
    if samples.notes:
        out.append("notes:")
        out += [f"  {n}" for n in samples.notes]
    return "\n".join(out) + "\n"
