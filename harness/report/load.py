"""A saved report back as the typed model: `load_report(folder or report.json) -> Report`, for
commands that render a report again without running anything (`harness report`).

The JSON is mapped onto the dataclasses by their type hints, so a field added to the model
is read back without a change here. Tolerant both ways: a key the model lacks (a newer
report) is ignored, a field the JSON lacks (an older report) gets its default, or an empty
value of its type; a JSON null stays None. Only what is not a report at all is an error."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.execute.watchdog import Limits
from harness.outcome import INTERRUPTED_BASE, USAGE, Kind
from harness.report.model import Report
from harness.sampling import frames as _frames  # noqa: F401  (Frame's subclasses, by JSON keys)

# report.json keys that are not Report fields: derived when written
_DERIVED = frozenset({"schema_version", "harness_version", "artifacts", "directory"})


class _Mismatch(Exception):
    """A JSON value that does not fit the field's type: the field keeps its default."""


def load_report(path: Path) -> Report:
    """The report saved in `path` (a report folder or its report.json)."""
    report_json = path / "report.json" if path.is_dir() else path
    if not report_json.is_file():
        if path.is_dir():
            where = f"{path} has no report.json"
        else:
            where = f"{path}: no such file" if not path.exists() else f"{path}: not a file"
        raise HarnessError(f"not a harness report: {where}", USAGE)
    try:
        data = json.loads(report_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HarnessError(f"{report_json}: not a harness report: {exc}", USAGE) from exc
    if not isinstance(data, dict):
        raise HarnessError(f"{report_json}: not a harness report: not a JSON object", USAGE)
    return report_from_json(data, report_json.parent)


def report_from_json(data: dict[str, Any], directory: Path) -> Report:
    """The typed report from report.json's data; `directory` is where its files are now."""
    fields = {k: v for k, v in data.items() if k not in _DERIVED}
    fields.setdefault("run_id", directory.name)
    fields.setdefault("harness_argv", [])
    if fields.get("mode") not in ("run", "watch"):
        fields["mode"] = "watch" if data.get("env") is None else "run"
    # `{}` is how to_json writes an absent pin, variant, command, limits or exit
    for key in ("pin", "variant", "command", "limits", "exit"):
        if fields.get(key) == {}:
            fields[key] = None
    limits = fields.get("limits")
    if isinstance(limits, dict) and "quiescent_s" in _field_names(Limits):
        # a report from before the quiescence window had none
        fields["limits"] = {"quiescent_s": 0.0, **limits}
    try:
        report = _build(Report, {**fields, "directory": str(directory)})
    except (_Mismatch, ValueError) as exc:  # e.g. a verdict kind this harness does not know
        why = str(exc) or "a required value does not fit its type"
        raise HarnessError(f"{directory}: not a harness report this version reads: {why}") from exc
    assert isinstance(report, Report)
    verdict, saved = report.verdict, data.get("verdict")
    if verdict is not None and isinstance(saved, dict):
        code = saved.get("exit_code")
        if verdict.kind is Kind.INTERRUPTED and isinstance(code, int) and code > INTERRUPTED_BASE:
            verdict.become(Kind.INTERRUPTED, signum=code - INTERRUPTED_BASE)
    return report


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve at runtime: keep raw values
        return {}


def _build(cls: type, data: Any) -> Any:
    """An instance of dataclass `cls` from a JSON object: of its dataclass subclass when the
    object has that subclass's own fields (a frame with `inline` is an InlinedFrame)."""
    if not isinstance(data, dict):
        raise _Mismatch
    for sub, own in _subclasses(cls):
        if all(name in data for name in own):
            cls = sub
            break
    kwargs: dict[str, Any] = {}
    for name, convert, empty in _plan(cls):
        if name in data:
            value = data[name]
            if value is None:  # null is data: kept as written
                kwargs[name] = None
                continue
            try:
                kwargs[name] = convert(value)
                continue
            except _Mismatch:
                pass
        if empty is not None:
            kwargs[name] = empty()
    return cls(**kwargs)


@cache
def _subclasses(cls: type) -> tuple[tuple[type, tuple[str, ...]], ...]:
    """The dataclass subclasses of `cls` with the fields they add, most specific first."""
    found: list[tuple[type, tuple[str, ...]]] = []
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        if dataclasses.is_dataclass(sub):
            own = tuple(sorted(_field_names(sub) - _field_names(cls)))
            if own:
                found += [*_subclasses(sub), (sub, own)]
    return tuple(found)


@cache
def _plan(cls: type) -> tuple[tuple[str, Converter, Callable[[], Any] | None], ...]:
    """Per init field of `cls`: its name, its converter, and for a field without a default
    the maker of an empty value."""
    hints = _hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints.get(f.name, Any)
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        empty = None if has_default else functools.partial(_empty, tp)
        plan.append((f.name, _converter(tp), empty))
    return tuple(plan)


Converter = Callable[[Any], Any]


def _raw(value: Any) -> Any:
    return value


@cache
def _converter(tp: Any) -> Converter:
    """A function: JSON value → `tp`, raising _Mismatch when it cannot be; None passes."""
    if tp is Any or tp is object:
        return _raw
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_converter(a) for a in args if a is not type(None)]
        return functools.partial(_first_fit, tuple(options))
    if origin is typing.Literal:
        return _raw
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return functools.partial(_build, tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return functools.partial(_member, tp)
    if origin in (list, tuple) or tp in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return functools.partial(_fixed_tuple, tuple(_converter(a) for a in args))
        item = _converter(args[0] if args else Any)
        return functools.partial(_sequence, item, (origin or tp) is tuple)
    if origin is dict or tp is dict:
        return functools.partial(_mapping, _converter(args[1] if len(args) == 2 else Any))
    if tp in _SCALARS:
        return functools.partial(_scalar, tp)
    return _raw  # a type we do not know: as written


def _none_or(convert: Converter, value: Any) -> Any:
    return None if value is None else convert(value)


def _first_fit(options: tuple[Converter, ...], value: Any) -> Any:
    if value is None:
        return None
    for convert in options:
        try:
            return convert(value)
        except _Mismatch:
            continue
    raise _Mismatch


def _sequence(item: Converter, as_tuple: bool, value: Any) -> Any:
    if not isinstance(value, list):
        raise _Mismatch
    items = [_none_or(item, v) for v in value]
    return tuple(items) if as_tuple else items


def _fixed_tuple(items: tuple[Converter, ...], value: Any) -> Any:
    if not isinstance(value, list):
        raise _Mismatch
    return tuple(_none_or(c, v) for c, v in zip(items, value, strict=False))


def _mapping(val: Converter, value: Any) -> Any:
    if not isinstance(value, dict):
        raise _Mismatch
    return {k: _none_or(val, v) for k, v in value.items()}


_SCALARS = (Path, bool, int, float, str)


def _scalar(tp: Any, value: Any) -> Any:
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp is bool and isinstance(value, bool):
        return value
    if isinstance(value, bool):  # JSON true is no number
        raise _Mismatch
    if tp is int and isinstance(value, int):
        return value
    if tp is float and isinstance(value, int | float):
        return value
    if tp is str and isinstance(value, str):
        return value
    raise _Mismatch


def _member(tp: type[enum.Enum], value: Any) -> Any:
    """A closed vocabulary's member (harness/vocab.py): an unknown word does not fit."""
    try:
        return tp(value)
    except ValueError:
        raise _Mismatch from None


def _empty(tp: Any) -> Any:
    """A value of type `tp` for a required field the JSON lacks."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return None if type(None) in args else _empty(args[0])
    if origin is typing.Literal:
        return args[0]
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _build(tp, {})
    if origin is list or tp is list:
        return []
    if origin is tuple or tp is tuple:
        return ()
    if origin is dict or tp is dict:
        return {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        raise ValueError(f"a required {tp.__name__} is missing or not one of its words")
    simple: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False, Path: Path()}
    return simple.get(tp)
