"""Stack and output signatures as data: the runtime patterns of harness/data/signatures.toml
and a pin's own [[signatures]] (its named hang locations), parsed and validated here;
harness.analysis.classify applies them."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from harness.errors import HarnessError


class FrameLike(Protocol):
    """What a pattern looks at in a stack frame (harness.sampling.model.Frame has it)."""

    @property
    def function(self) -> str: ...
    @property
    def file(self) -> str | None: ...
    @property
    def module(self) -> str | None: ...


@dataclass(frozen=True)
class Pattern:
    name: str
    functions: tuple[re.Pattern[str], ...]
    files: tuple[str, ...] = ()
    modules: tuple[re.Pattern[str], ...] = ()
    passive: bool = False
    mechanism: str | None = None

    def matches(self, frame: FrameLike) -> bool:
        if self.files and not (frame.file and frame.file.endswith(self.files)):
            return False
        if self.modules:
            base = (frame.module or "").rsplit("/", 1)[-1]
            if not any(rx.fullmatch(base) for rx in self.modules):
                return False
        # glibc's internal aliases (__GI___wait4) are the public function under another name
        name = frame.function.removeprefix("__GI_")
        return not self.functions or any(rx.fullmatch(name) for rx in self.functions)


@dataclass(frozen=True)
class OutputPattern:
    name: str
    regex: re.Pattern[str]
    summary: str


@dataclass(frozen=True)
class Signatures:
    runtime: tuple[Pattern, ...]
    output: tuple[OutputPattern, ...]
    own: tuple[Pattern, ...] = ()  # the upstream's named locations, in priority order

    def with_own(self, own: Sequence[Pattern]) -> Signatures:
        return Signatures(self.runtime, self.output, tuple(own))


def pattern_from_table(table: dict[str, Any], where: str) -> Pattern:
    try:
        pattern = Pattern(
            name=str(table["name"]),
            functions=tuple(re.compile(f) for f in table.get("functions", ())),
            files=tuple(table.get("files", ())),
            modules=tuple(re.compile(m) for m in table.get("modules", ())),
            passive=bool(table.get("passive", False)),
            mechanism=table.get("mechanism"),
        )
    except (KeyError, TypeError, re.error) as exc:
        raise HarnessError(f"{where}: bad signature entry {table!r}: {exc}") from exc
    if not (pattern.functions or pattern.modules):
        raise HarnessError(f"{where}: signature {pattern.name!r} needs functions or modules")
    return pattern


def load_signatures() -> Signatures:
    text = resources.files("harness").joinpath("data/signatures.toml").read_text()
    data = tomllib.loads(text)
    runtime = tuple(pattern_from_table(t, "signatures.toml") for t in data.get("runtime", []))
    output = tuple(
        OutputPattern(t["name"], re.compile(t["regex"]), t["summary"])
        for t in data.get("output", [])
    )
    return Signatures(runtime, output)
