"""A saved report back as the typed model: `load_report(folder or report.json) -> Report`, for
commands that render or check a report again without running anything (`harness report`,
`harness check`).

A saved report is input like any other: it may be damaged, hand-edited, from a newer
harness, or hostile. So it is read bounded and checked before anything uses it:

- **regular files inside the folder only** (`harness.contain`): report.json and every file
  under evidence/ is resolved inside the report folder and opened with O_NOFOLLOW as a
  regular file; a FIFO, a device (`evidence/pin.json -> /dev/zero`), a folder or a link out
  of the folder is refused before a byte is read;
- **size caps**: at most `REPORT_JSON_LIMIT` for report.json and `EVIDENCE_LIMIT` for an
  evidence file (more is refused, not cut: half a JSON file is no report); output.log is
  read to its last `pipeline.saved.OUTPUT_LOG_LIMIT` bytes, with a note;
- **nesting**: JSON deeper than `MAX_DEPTH` is refused (Python's json parser would raise
  RecursionError at about a thousand levels, and a renderer that walks it could too);
- **schema_version**: one of `SCHEMA_VERSIONS_READ`; a newer one is refused with the
  versions this harness reads, never misread;
- **types**: the JSON is mapped onto the dataclasses by their type hints, so a field added to
  the model is read back without a change here. Tolerant of age (a key the model lacks is
  ignored, a field the JSON lacks gets its default or an empty value of its type) but not of
  damage: a value of the wrong type, a word outside its vocabulary (a verdict kind "quantum-
  hang"), a null where no null belongs, or a non-finite number in a typed field is an error
  naming the file and the key path (`…/report.json: not a harness report this version
  reads: limits.wall_s: inf is not a finite number`). Values inside free-form maps and
  lists (metrics, a pin's tables) are data and are kept as written. So `host` (a
  `HostFingerprint`) and `conditions` (`HostConditions`) are read typed like any field, and a
  report from before they were recorded reads with both None.

Every refusal is one `HarnessError` line with the USAGE exit code."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from harness import vocab
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import INTERRUPTED_BASE, Kind
from harness.report.model import Report
from harness.report.reading import check_schema_version, read_report_json
from harness.sampling import frames as _frames  # noqa: F401  (Frame's subclasses, by JSON keys)
from harness.vocab import RunMode
from harness.watch.watchdog import Limits

# report.json keys that are not Report fields: derived when written
_DERIVED = frozenset({"schema_version", "harness_version", "artifacts", "directory"})


class _Mismatch(Exception):
    """A JSON value that does not fit its field's type, at a key path (innermost first)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why
        self.path: list[str] = []

    def within(self, part: str) -> _Mismatch:
        self.path.insert(0, part)
        return self

    def where(self) -> str:
        return "".join(p if p.startswith("[") else f".{p}" for p in self.path).lstrip(".")


# ---------------------------------------------------------------- report.json → Report


def load_report(path: Path) -> Report:
    """The report saved in `path` (a report folder or its report.json)."""
    report_json, data = read_report_json(path)
    return report_from_json(data, report_json.parent, report_json)


def report_from_json(data: dict[str, Any], directory: Path, source: Path | None = None) -> Report:
    """The typed report from report.json's data; `directory` is where its files are now;
    `source` names the file in errors (default: directory/report.json)."""
    source = source or directory / REPORT_JSON
    check_schema_version(data, source)
    fields = {k: v for k, v in data.items() if k not in _DERIVED}
    fields.setdefault("run_id", directory.name)
    fields.setdefault("harness_argv", [])
    if fields.get("mode") not in vocab.values(RunMode):
        fields["mode"] = RunMode.WATCH if data.get("env") is None else RunMode.RUN
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
    except _Mismatch as exc:
        where = f"{exc.where()}: " if exc.path else ""
        why = f"{where}{exc.why}"
        raise HarnessError(f"{source}: not a harness report this version reads: {why}") from None
    except (ValueError, TypeError) as exc:  # a value the model's own checks refuse
        raise HarnessError(f"{source}: not a harness report this version reads: {exc}") from None
    assert isinstance(report, Report)
    verdict, saved = report.verdict, data.get("verdict")
    if verdict is not None and isinstance(saved, dict):
        code = saved.get("exit_code")
        if (
            verdict.kind is Kind.INTERRUPTED
            and isinstance(code, int)
            and INTERRUPTED_BASE < code < INTERRUPTED_BASE + 128
        ):
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
        raise _Mismatch(f"expected an object, found {_json_type(data)}")
    for sub, own in _subclasses(cls):
        if all(name in data for name in own):
            cls = sub
            break
    kwargs: dict[str, Any] = {}
    for name, convert, empty, nullable in _plan(cls):
        if name not in data:
            if empty is not None:
                try:
                    kwargs[name] = empty()
                except _Mismatch as exc:
                    raise exc.within(name) from None
            continue
        value = data[name]
        if value is None:
            if not nullable:  # a limit, a list, a word: null is damage, not data
                raise _Mismatch("null where a value is required").within(name)
            kwargs[name] = None
            continue
        try:
            kwargs[name] = convert(value)
        except _Mismatch as exc:
            raise exc.within(name) from None
        if isinstance(kwargs[name], float) and not math.isfinite(kwargs[name]):
            raise _Mismatch(f"{value} is not a finite number").within(name)
    return cls(**kwargs)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "an array"))
    return next((name for t, name in kinds if isinstance(value, t)), "an object")


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
def _plan(cls: type) -> tuple[tuple[str, Converter, Callable[[], Any] | None, bool], ...]:
    """Per init field of `cls`: its name, its converter, for a field without a default the
    maker of an empty value, and whether a JSON null may stand for it."""
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
        plan.append((f.name, _converter(tp), empty, _nullable(tp)))
    return tuple(plan)


def _nullable(tp: Any) -> bool:
    """Whether null may stand for a `tp`: an Optional or a free value. A number the model
    may not know (a NaN, written as null) is typed Optional there."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return type(None) in args
    return tp in (Any, object)


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
        options = tuple(_converter(a) for a in args if a is not type(None))
        return options[0] if len(options) == 1 else functools.partial(_first_fit, options)
    if origin is typing.Literal:
        return functools.partial(_literal, args)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return functools.partial(_build, tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return functools.partial(_member, tp)
    if origin in (list, tuple) or tp in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return functools.partial(_fixed_tuple, tuple(_item(a) for a in args))
        return functools.partial(
            _sequence, _item(args[0] if args else Any), (origin or tp) is tuple
        )
    if origin is dict or tp is dict:
        return functools.partial(_mapping, _item(args[1] if len(args) == 2 else Any))
    if tp in _SCALARS:
        return functools.partial(_scalar, tp)
    return _raw  # a type we do not know: as written


def _item(tp: Any) -> Converter:
    """The converter of a list item or map value, null included: kept where the type takes
    None, a NaN where it is a number (the model writes a NaN, a trainer's `loss nan`, as
    null), a mismatch elsewhere."""
    convert = _converter(tp)
    if _nullable(tp):
        return functools.partial(_none_or, convert)
    if tp is float:
        return functools.partial(_nan_or, convert)
    return convert


def _none_or(convert: Converter, value: Any) -> Any:
    return None if value is None else convert(value)


def _nan_or(convert: Converter, value: Any) -> Any:
    return math.nan if value is None else convert(value)


def _first_fit(options: tuple[Converter, ...], value: Any) -> Any:
    if value is None:
        return None
    last = _Mismatch(f"{_json_type(value)} fits none of its types")
    for convert in options:
        try:
            return convert(value)
        except _Mismatch as exc:
            last = exc
            continue
    raise last


def _literal(words: tuple[Any, ...], value: Any) -> Any:
    if value in words and type(value) in {type(w) for w in words}:
        return value
    raise _Mismatch(f"{json.dumps(value)[:60]} is not one of {', '.join(map(str, words))}")


def _sequence(item: Converter, as_tuple: bool, value: Any) -> Any:
    if not isinstance(value, list):
        raise _Mismatch(f"expected an array, found {_json_type(value)}")
    items = []
    for i, v in enumerate(value):
        try:
            items.append(item(v))
        except _Mismatch as exc:
            raise exc.within(f"[{i}]") from None
    return tuple(items) if as_tuple else items


def _fixed_tuple(items: tuple[Converter, ...], value: Any) -> Any:
    if not isinstance(value, list):
        raise _Mismatch(f"expected an array, found {_json_type(value)}")
    out = []
    for i, (c, v) in enumerate(zip(items, value, strict=False)):
        try:
            out.append(c(v))
        except _Mismatch as exc:
            raise exc.within(f"[{i}]") from None
    return tuple(out)


def _mapping(val: Converter, value: Any) -> Any:
    if not isinstance(value, dict):
        raise _Mismatch(f"expected an object, found {_json_type(value)}")
    out = {}
    for k, v in value.items():
        try:
            out[k] = val(v)
        except _Mismatch as exc:
            raise exc.within(str(k)) from None
    return out


_SCALARS = (Path, bool, int, float, str)
_SCALAR_NAMES = {Path: "a path", bool: "a boolean", int: "an integer", float: "a number"}


def _scalar(tp: Any, value: Any) -> Any:
    if tp is Path and isinstance(value, str):
        return Path(value)
    if tp is bool and isinstance(value, bool):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    # JSON true is no number; a float field takes an integer (json writes 1.0 as 1.0, but a
    # hand-written report may say 60)
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    expected = _SCALAR_NAMES.get(tp, "a string")
    raise _Mismatch(f"expected {expected}, found {_json_type(value)}")


def _member(tp: type[enum.Enum], value: Any) -> Any:
    """A closed vocabulary's member (harness/vocab.py): an unknown word does not fit."""
    try:
        return tp(value)
    except ValueError:
        words = ", ".join(str(m.value) for m in tp)
        shown = json.dumps(value)[:60]
        raise _Mismatch(
            f"{shown} is not a {tp.__name__} this harness knows: it is not one of {words}"
        ) from None


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
        raise _Mismatch(f"a required {tp.__name__} is missing")
    simple: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False, Path: Path()}
    return simple.get(tp)
