"""Stack and output signatures as data: the runtime patterns of harness/data/signatures.toml
and a pin's own [[signatures]] (its named hang locations), parsed and validated here;
harness.analysis.classify applies them."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, Field, model_validator

from harness.config.fields import (
    WORD,
    Regex,
    Strict,
    StrList,
    Text,
    fail,
    one_of,
    schema_version,
)
from harness.config.schema_errors import read_toml, validate
from harness.sampling.runtimes import RUNTIMES
from harness.vocab import Mechanism

SIGNATURES_SCHEMA_VERSION = 1


class FrameLike(Protocol):
    """What a pattern looks at in a stack frame (harness.sampling.model.Frame has it)."""

    @property
    def function(self) -> str: ...
    @property
    def file(self) -> str | None: ...
    @property
    def module(self) -> str | None: ...
    @property
    def runtime(self) -> str | None: ...


@dataclass(frozen=True)
class Pattern:
    name: str
    functions: tuple[re.Pattern[str], ...]
    files: tuple[str, ...] = ()
    modules: tuple[re.Pattern[str], ...] = ()
    passive: bool = False
    mechanism: Mechanism | None = None
    runtimes: tuple[str, ...] = ()

    def matches(self, frame: FrameLike) -> bool:
        if self.files and not (frame.file and frame.file.endswith(self.files)):
            return False
        if (self.runtimes or self.modules) and not self._module_matches(frame):
            return False
        # glibc's internal aliases (__GI___wait4) are the public function under another name
        name = frame.function.removeprefix("__GI_")
        return not self.functions or any(rx.fullmatch(name) for rx in self.functions)

    def _module_matches(self, frame: FrameLike) -> bool:
        """`runtimes` decide for a frame whose module the sampler examined (its runtime is
        set: a name, or "" for none known); `modules` for one it did not (an older report,
        a module it could not read), and for a pattern without `runtimes`, where an
        identified runtime also goes by its canonical file name ("libgomp.so")."""
        if self.runtimes and frame.runtime is not None:
            return frame.runtime in self.runtimes
        base = (frame.module or "").rsplit("/", 1)[-1]
        names = [base, f"{frame.runtime}.so"] if frame.runtime else [base]
        return any(rx.fullmatch(n) for rx in self.modules for n in names)


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


class SignatureModel(Strict):
    """One [[signatures]] entry of a pin, or one [[runtime]] pattern of signatures.toml."""

    name: Text
    functions: list[Regex] = Field(default_factory=list)
    modules: list[Regex] = Field(default_factory=list)
    # runtimes by what they are (sampling/runtimes.py), whatever their files are called
    runtimes: list[Annotated[str, AfterValidator(one_of(lambda: RUNTIMES, "runtime"))]] = Field(
        default_factory=list
    )
    files: StrList = Field(default_factory=list)
    passive: bool = False
    mechanism: Annotated[Mechanism, WORD] | None = None
    description: str = ""

    @model_validator(mode="after")
    def _locates(self) -> SignatureModel:
        if not (self.functions or self.modules or self.runtimes):
            raise fail(f"signature {self.name!r} needs functions, modules or runtimes")
        return self

    def pattern(self) -> Pattern:
        return Pattern(
            name=self.name,
            functions=tuple(re.compile(f) for f in self.functions),
            files=tuple(self.files),
            modules=tuple(re.compile(m) for m in self.modules),
            passive=self.passive,
            mechanism=self.mechanism,
            runtimes=tuple(self.runtimes),
        )


def _summary_fields(model: OutputModel) -> OutputModel:
    groups = set(re.compile(model.regex).groupindex)
    try:
        names = {n for _, n, _, _ in string.Formatter().parse(model.summary) if n is not None}
    except ValueError as exc:
        raise fail(f"summary {model.summary!r}: {exc}") from None
    unknown = sorted(names - groups)
    if unknown:
        raise fail(f"summary uses {{{unknown[0]}}}, not a named group of the regex")
    return model


class OutputModel(Strict):
    """One [[output]] pattern: a regex over an output line, and its summary."""

    name: Text
    regex: Regex
    summary: str


class SignaturesModel(Strict):
    """harness/data/signatures.toml."""

    schema_version: Annotated[int, AfterValidator(schema_version(SIGNATURES_SCHEMA_VERSION))]
    runtime: list[SignatureModel] = Field(default_factory=list)
    output: list[Annotated[OutputModel, AfterValidator(_summary_fields)]] = Field(
        default_factory=list
    )


def pattern_from_table(table: Mapping[str, Any], where: str) -> Pattern:
    """One signature table as a Pattern; a one-line usage error naming `where`."""
    return validate(SignatureModel, table, where).pattern()


def signatures_from_file(path: Path) -> Signatures:
    model = validate(SignaturesModel, read_toml(path), path.name)
    output = tuple(OutputPattern(o.name, re.compile(o.regex), o.summary) for o in model.output)
    return Signatures(tuple(s.pattern() for s in model.runtime), output)


@cache
def load_signatures() -> Signatures:
    """The shipped signatures (harness/data/signatures.toml), validated once."""
    with resources.as_file(resources.files("harness").joinpath("data/signatures.toml")) as path:
        return signatures_from_file(path)
