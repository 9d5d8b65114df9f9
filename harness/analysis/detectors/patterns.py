"""Detectors that apply a rule's own patterns: a regex over the output's tail, regexes over
the functions of the sampled stacks. A pin's cause of a known shape needs no code."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.analysis.detectors.registry import Inputs, Match, detector, match
from harness.analysis.views import stack_line
from harness.vocab import Need


@dataclass(frozen=True)
class OutputParams:
    regex: re.Pattern[str]  # searched in each line of the tail, the last line first


def _groups(params: OutputParams) -> tuple[str, ...]:
    return tuple(params.regex.groupindex)


@detector(
    "output",
    needs=(Need.OUTPUT,),
    params=OutputParams,
    fields=("line",),
    more_fields=_groups,
)
def output(seen: Inputs, params: OutputParams) -> list[Match]:
    """The last line of the output tail the regex finds: its named groups are fields."""
    for line in reversed(seen.output_tail):
        m = params.regex.search(line)
        if m:
            groups = {k: v or "" for k, v in m.groupdict().items()}
            return [match([f"output: {line.strip()}"], **groups, line=line.strip())]
    return []


@dataclass(frozen=True)
class FramesParams:
    functions: tuple[re.Pattern[str], ...] = ()  # each matched against a whole function name


@detector("frames", params=FramesParams, fields=("function", "pid", "tid"))
def frames(seen: Inputs, params: FramesParams) -> list[Match]:
    """The first sampled frame whose function one of the regexes matches whole."""
    for st in seen.samples.stacks:
        for f in st.frames:
            if any(p.fullmatch(f.function) for p in params.functions):
                evidence = [f"pid {st.pid} tid {st.tid}: {stack_line(st, 6)}"]
                return [match(evidence, function=f.function, tid=st.tid, pid=st.pid)]
    return []
