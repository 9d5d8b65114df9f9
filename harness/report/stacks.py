"""stacks.txt: every stack taken, innermost frame first, `[own]` on the program's frames.

Thread names, functions and paths are the program's own bytes and the file is read on a
terminal (`cat`, `less -R`): they are written without terminal controls."""

from __future__ import annotations

from harness.sampling.model import SampleSet
from harness.text import terminal_safe as safe


def render_stacks(samples: SampleSet) -> str:
    out: list[str] = []
    for st in samples.stacks:
        out.append(f"== pid {st.pid} tid {st.tid} '{safe(st.name)}' ({st.source})")
        for i, f in enumerate(st.frames):
            where = f.file or f.module or ""
            if f.file and f.line:
                where = f"{f.file}:{f.line}"
            own = " [own]" if f.own else ""
            shown = f"{f.function}{'  ' + where if where else ''}"
            out.append(f"  #{i:<2} {safe(shown)}{own}")
        out.append("")
    if samples.notes:
        out.append("notes:")
        out += [f"  {safe(n)}" for n in samples.notes]
    return "\n".join(out) + "\n"
