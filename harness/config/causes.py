"""Cause rules as data (harness/data/causes.toml and a pin's [[causes]]), read into typed
`Rule`s. What can be checked without the detectors is checked here, at load: the verdict
kinds and mechanisms against their registries, the confidence, the templates. A rule's
`params` are checked where rules meet detectors (`harness.analysis.causes.check`), against
the params class its detector declares; `bind_params` builds that class from the table
(the regexes compiled) and lives here because it is about the TOML, not about detecting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import re
import string
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from harness.config.fields import WORD, Strict, StrList, Text, fail, schema_version
from harness.config.schema_errors import one_line, read_toml, show, validate
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from harness.vocab import AxisKind, Confidence, Mechanism

CAUSES_SCHEMA_VERSION = 1

P = TypeVar("P")


# ---------------------------------------------------------------- knobs a triage tries
# Here, not in config/pin.py, because both a pin's [triage] table and a cause rule hold them
# and pin.py imports this module; harness.config.pin re-exports TriageKnob.


@dataclass(frozen=True)
class TriageKnob:
    """One knob `harness triage` tries: a trainer config key (SET: passed as
    `--section.key=VALUE`) or a trainer environment variable (ENV), with the values to try.
    The engine turns it into a `harness.pipeline.sweep.Knob` (same kind, name and values)."""

    kind: AxisKind  # SET or ENV only
    name: str  # "vec.num_threads" (no leading dashes) or "OMP_WAIT_POLICY"
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.kind not in (AxisKind.SET, AxisKind.ENV):
            raise ValueError(f"a triage knob is a set or an env knob, not {self.kind}")

    @property
    def label(self) -> str:
        """As `harness.pipeline.sweep.Knob.label`: `--section.key`, or the variable's name."""
        return f"--{self.name}" if self.kind is AxisKind.SET else self.name

    def text(self) -> str:
        """`--vec.num_threads=4,16`, `OMP_WAIT_POLICY=active,passive`: as sweep's --set and
        --env take it."""
        return f"{self.label}={','.join(self.values)}"


# a trainer key as upstream's `--sec.key=value` takes it: dashes and underscores both (the
# trainer turns dashes into underscores); nested sections (`a.b.c`) allowed
_SET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _set_name(value: str) -> str:
    if value.startswith("-"):
        raise fail(f"write the trainer key without dashes: {show(value.lstrip('-'))}")
    if not _SET_NAME.fullmatch(value):
        raise fail(
            f"expected a trainer config key section.key (e.g. vec.num_threads, passed as "
            f"--vec.num_threads=VALUE), not {show(value)}"
        )
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise fail(
            f"expected an environment variable name (e.g. OMP_WAIT_POLICY), not {show(value)}"
        )
    return value


# a knob's value that stands for "not set" in triage's tables (its Reproduce runs)
KNOB_DEFAULT = "default"


def _knob_values(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"expected a list of strings, not {show(value)}")
    if not value:
        raise fail("a knob needs at least one value to try")
    for item in value:
        if not item.strip() or any(ord(c) < 32 or ord(c) == 127 for c in item):
            raise fail(f"a value must be printable text, not {show(item)}")
        if "," in item:  # sweep's --set/--env split on commas: triage's commands could not
            raise fail(f"a value may not hold a comma (sweep splits values on it): {show(item)}")
        if item == KNOB_DEFAULT:  # triage's name for "no override": Reproduce's own runs
            raise fail(f"{KNOB_DEFAULT!r} names the run without the knob; give the value itself")
    if len(set(value)) != len(value):
        raise fail(f"a value is given twice: {show(value)}")
    return value


class TriageKnobModel(Strict):
    """One knob: `{ set = "section.key", values = [...] }` (a trainer config key) or
    `{ env = "NAME", values = [...] }` (a trainer environment variable)."""

    set: Annotated[str, AfterValidator(_set_name)] | None = None
    env: Annotated[str, AfterValidator(_env_name)] | None = None
    values: Annotated[list[str], BeforeValidator(_knob_values)]

    @model_validator(mode="after")
    def _one_kind(self) -> TriageKnobModel:
        if (self.set is None) == (self.env is None):
            got = "both" if self.set is not None else "neither"
            raise fail(
                f"a knob takes exactly one of set (a trainer key) or env (a variable); "
                f"this one has {got}: {show(self.model_dump(exclude_none=True))}"
            )
        return self

    def knob(self) -> TriageKnob:
        if self.set is not None:
            return TriageKnob(AxisKind.SET, self.set, tuple(self.values))
        return TriageKnob(AxisKind.ENV, self.env or "", tuple(self.values))


def _unique_knobs(knobs: list[TriageKnobModel]) -> list[TriageKnobModel]:
    labels = [k.knob().label for k in knobs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise fail(f"a knob is given twice: {', '.join(twice)} (list its values once)")
    return knobs


KnobList = Annotated[list[TriageKnobModel], AfterValidator(_unique_knobs)]


@dataclass(frozen=True)
class Rule:
    """One cause rule: when it applies (verdict kinds, hang mechanisms), which detector
    looks, and what is said (templates over the detector's fields and the common ones)."""

    id: str
    detector: str
    kinds: tuple[Kind, ...]
    sentence: str
    confidence: Confidence = Confidence.MEDIUM
    mechanisms: tuple[Mechanism, ...] = ()  # empty: any (hangs only have one)
    remedies: tuple[str, ...] = ()
    command: str = ""  # the one command to try ("{compare}"), a template; "" when none
    # as written in the TOML; the detector's params class says what they may be
    params: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""  # the file it came from, for errors
    knobs: tuple[TriageKnob, ...] = ()  # what `harness triage` tries when this cause is on top
    # the doctor probes that bear on this cause: `harness triage`'s Explain runs them when
    # it is on top (names of `harness doctor`'s probes, checked when they run)
    doctor: tuple[str, ...] = ()
    # a reading of last resort (the wake graph's, data/causes/wake.toml): read only when no
    # other rule names the run, and then only the first fallback that finds something
    fallback: bool = False

    def fail(self, what: str) -> HarnessError:
        """A one-line usage error about this rule."""
        return HarnessError(one_line(f"{self.where}: cause {self.id}: {what}"), USAGE)

    @property
    def templates(self) -> tuple[str, ...]:
        return (self.sentence, *self.remedies, self.command)


_formatter = string.Formatter()


class Fields(dict[str, str]):
    """A template's values: a field nobody gave stays visible as `{field}` (a check of a
    template formats it with none; a cause's match may lack one)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def template_fields(text: str) -> set[str]:
    """The `{field}` names a template uses."""
    return {name for _, name, _, _ in _formatter.parse(text) if name}


def _check_template(rule: Rule, text: str) -> None:
    try:  # a template must format: `{field}` only (no positional, attribute or format spec)
        text.format_map(Fields())
        for _, name, spec, conversion in _formatter.parse(text):
            if name is not None and (not name.isidentifier() or spec or conversion):
                raise ValueError(f"{{{name}}} is not a plain {{field}}")
    except (IndexError, ValueError, KeyError, AttributeError) as exc:
        raise rule.fail(f"bad template {text!r}: {exc}") from exc


def _kinds(values: list[Kind]) -> list[Kind]:
    if not values:
        raise fail("kinds must be a non-empty list of verdict kinds")
    return values


class CauseModel(Strict):
    """One [[causes]] entry (harness/data/causes.toml, a pin's own)."""

    id: Text
    detector: Text  # checked against the registry of detectors before a run
    kinds: Annotated[list[Annotated[Kind, WORD]], AfterValidator(_kinds)]
    sentence: Text
    confidence: Annotated[Confidence, WORD] = Confidence.MEDIUM
    mechanisms: list[Annotated[Mechanism, WORD]] = Field(default_factory=list)
    remedies: StrList = Field(default_factory=list)
    command: str = ""
    # the detector's params class says what they may be (harness.analysis.causes.check)
    params: dict[str, Any] = Field(default_factory=dict)
    # knobs that can change this cause's outcome: `harness triage` sweeps them
    knobs: KnobList = Field(default_factory=list)
    # the doctor probes that bear on it: triage's Explain runs them when it is on top
    doctor: StrList = Field(default_factory=list)
    # read only when no other rule names the run; the first fallback that finds wins
    fallback: bool = False


class CausesModel(Strict):
    """harness/data/causes.toml: the shipped rules."""

    schema_version: Annotated[int, AfterValidator(schema_version(CAUSES_SCHEMA_VERSION))]
    causes: list[CauseModel] = Field(default_factory=list)


def rule_from_table(table: Mapping[str, Any], where: str) -> Rule:
    """One [[causes]] entry as a Rule; a one-line HarnessError naming `where`, the cause id
    and what is allowed when it is not one."""
    if not isinstance(table, Mapping):
        raise HarnessError(f"{where}: a [[causes]] entry must be a table", USAGE)
    ident = table.get("id")
    rule = Rule(id=ident if isinstance(ident, str) else "?", detector="", kinds=(), sentence="")
    rule = dataclasses.replace(rule, where=where)
    known = sorted(CauseModel.model_fields)
    unknown = sorted(str(k) for k in set(table) - set(known))
    if unknown:  # said before the types: a misspelt key often explains a missing one
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
        raise rule.fail(f"unknown key(s) {', '.join(unknown)}{hint}")
    model = validate(CauseModel, table, f"{where}: cause {rule.id}")
    rule = dataclasses.replace(
        rule,
        detector=model.detector,
        kinds=tuple(model.kinds),
        sentence=model.sentence,
        confidence=model.confidence,
        mechanisms=tuple(model.mechanisms),
        remedies=tuple(model.remedies),
        command=model.command,
        params=dict(model.params),
        knobs=tuple(k.knob() for k in model.knobs),
        doctor=tuple(model.doctor),
        fallback=model.fallback,
    )
    for text in rule.templates:
        _check_template(rule, text)
    return rule


def rules_from_tables(tables: Iterable[Mapping[str, Any]], where: str) -> tuple[Rule, ...]:
    if not isinstance(tables, list | tuple):
        raise HarnessError(f"{where}: causes must be an array of tables ([[causes]])", USAGE)
    rules = tuple(rule_from_table(t, where) for t in tables)
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise rule.fail("a second rule with this id")
        seen.add(rule.id)
    return rules


def _shipped_files() -> list[tuple[str, Any]]:
    """data/causes.toml, then every data/causes/*.toml in name order: one file per family of
    causes, so that a new family is a new file (ids stay unique across all of them)."""
    root = resources.files("harness").joinpath("data")
    files = [("causes.toml", root.joinpath("causes.toml"))]
    folder = root.joinpath("causes")
    if folder.is_dir():
        files += sorted(
            (f"causes/{entry.name}", entry)
            for entry in folder.iterdir()
            if entry.name.endswith(".toml") and entry.is_file()
        )
    return files


@cache
def shipped_rules() -> tuple[Rule, ...]:
    """The rules shipped with the harness (every shipped file's), after any pin's own."""
    with contextlib.ExitStack() as stack:  # the paths are valid while their contexts last
        files = [
            (f"harness/data/{name}", stack.enter_context(resources.as_file(entry)))
            for name, entry in _shipped_files()
        ]
        return rules_of_files(files)


def rules_of_files(files: Iterable[tuple[str, Path]]) -> tuple[Rule, ...]:
    """The rules of several cause files (named as `where` in errors), ids unique across."""
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for where, path in files:
        data = read_toml(path)
        validate(CausesModel, {**data, "causes": []}, where)  # the file's own keys
        for rule in rules_from_tables(data.get("causes", []), where):
            if rule.id in seen:
                raise rule.fail(f"a second rule with this id (the first is in {seen[rule.id]})")
            seen[rule.id] = where
            rules.append(rule)
    return tuple(rules)


# ---------------------------------------------------------------- a detector's params


class NoParams:
    """The params class of a detector that takes none."""


def _convert(rule: Rule, name: str, tp: Any, value: Any) -> Any:
    """A TOML value as the declared type; a regex compiled."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, list):
            raise rule.fail(f"params.{name} must be a list")
        return tuple(_convert(rule, f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
    if tp is re.Pattern or origin is re.Pattern:
        if not isinstance(value, str):
            raise rule.fail(f"params.{name} must be a regex (a string)")
        try:
            return re.compile(value)
        except re.error as exc:
            raise rule.fail(f"params.{name}: bad regex {value!r}: {exc}") from None
    if isinstance(tp, type) and issubclass(tp, StrEnum):  # a closed set (vocab.py)
        words = [m.value for m in tp]
        if value not in words:
            raise rule.fail(f"params.{name} must be one of {', '.join(words)}, not {value!r}")
        return tp(value)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp in (str, int, bool) and type(value) is tp:
        return value
    raise rule.fail(f"params.{name} must be a {getattr(tp, '__name__', tp)}, not {value!r}")


def param_specs(cls: type[Any]) -> list[tuple[str, Any, bool]]:
    """(name, type, required) per field of a params class: what `params` may hold."""
    if not dataclasses.is_dataclass(cls):
        return []
    hints = typing.get_type_hints(cls)
    return [
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    ]


def describe_params(cls: type[Any]) -> str:
    specs = param_specs(cls)
    if not specs:
        return "no params"
    return ", ".join(f"{n}{'' if req else '?'}" for n, _, req in specs)


def bind_params(rule: Rule, cls: type[P], detector: str) -> P:
    """The rule's params as the detector's params class `cls` (a dataclass whose fields
    are the params, typed with one of the types above; a field without a default is
    required). Unknown or missing params and bad values are one-line usage errors."""
    specs = param_specs(cls)
    known = {n for n, _, _ in specs}
    unknown = sorted(set(rule.params) - known)
    takes = describe_params(cls)
    if unknown:
        raise rule.fail(
            f"detector {detector} takes {takes}, not params.{', params.'.join(unknown)}"
        )
    missing = [n for n, _, req in specs if req and n not in rule.params]
    if missing:
        raise rule.fail(f"detector {detector} needs params.{', params.'.join(missing)}")
    values = {n: _convert(rule, n, tp, rule.params[n]) for n, tp, _ in specs if n in rule.params}
    return cls(**values)
