"""JSON data as the harness's typed results: the one way report.json, triage.json and
repeat.json become dataclasses (`parse`), pydantic over the dataclasses' own type hints,
strictly as JSON means it. The bytes are read before, bounded (`report.reading`).

A wrong value is one line: its key path in JSON's form (`rows[0].report_dir`,
`samples.stacks[0].frames[1].line`) and what is wrong in JSON's words (`expected a number,
found a string`, `"maybe" is not one of pass, fail, skip`)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from harness.config.schema_errors import what_is_wrong

T = TypeVar("T")


# pydantic's reader of each dataclass, built on first use: one costs tens of ms, and every
# harness start imports the modules that use them
_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    found = _ADAPTERS.get(cls)
    if found is None:
        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


def parse(cls: type[T], data: object, root: str = "") -> T:
    """JSON data (already read, bounded, nesting checked) as `cls`, strictly as JSON means
    it: a string is no number, true is no integer, a path and a vocabulary word are strings.
    The data goes to pydantic as JSON text again (pydantic's Python mode would take "600"
    as a number, or refuse a word for its enum); NaN and ±Infinity as Python's json reads
    them; a string with a lone surrogate (a command line's undecodable byte, as Python
    names it) is carried through (`_carried`). A ValueError says the first wrong value in
    one line, its key path under `root` (validation_line), or what the model's own checks
    refuse."""
    try:
        text = json.dumps(data, allow_nan=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # not JSON data: a caller's mistake, said plainly
        raise ValueError(f"not JSON data: {exc}") from None
    try:
        raw, carried = text.encode("utf-8"), False
    except UnicodeEncodeError:  # a lone surrogate: no JSON parser but Python's reads it
        raw, carried = json.dumps(_carried(data), allow_nan=True).encode("utf-8"), True
    try:
        value = _adapter(cls).validate_json(raw, strict=True)
    except ValidationError as exc:
        raise ValueError(validation_line(exc, root, data)) from None
    return _restored(value) if carried else value


# a string that held a lone surrogate, as its UTF-8 bytes (surrogatepass) in hex
_CARRIED = "\x00surrogates:"
_LONE = re.compile("[\ud800-\udfff]")


def _carried(data: Any) -> Any:
    """The data with each string pydantic cannot read (a lone surrogate in it), and each
    that starts as a carried one does, written as `_CARRIED` + hex."""
    if isinstance(data, str):
        if _LONE.search(data) or data.startswith(_CARRIED):
            return _CARRIED + data.encode("utf-8", "surrogatepass").hex()
        return data
    if isinstance(data, dict):
        return {_carried(k): _carried(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_carried(v) for v in data]
    return data


def _uncarried(text: str) -> str:
    return bytes.fromhex(text[len(_CARRIED) :]).decode("utf-8", "surrogatepass")


def _restored(value: Any) -> Any:
    """A parsed value with every carried string (a path's too) as it was."""
    if isinstance(value, str):  # a vocabulary word never starts with _CARRIED
        return _uncarried(value) if value.startswith(_CARRIED) else value
    if isinstance(value, PurePath):
        text = str(value)
        return type(value)(_uncarried(text)) if text.startswith(_CARRIED) else value
    if isinstance(value, list):
        value[:] = [_restored(v) for v in value]
    elif type(value) is tuple:
        return tuple(_restored(v) for v in value)
    elif isinstance(value, dict):
        return {_restored(k): _restored(v) for k, v in value.items()}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):  # frozen ones too: the value is being built
            object.__setattr__(value, f.name, _restored(getattr(value, f.name)))
    return value


_ABSENT = object()


def json_path(loc: Sequence[str | int], data: object = _ABSENT, missing: bool = False) -> str:
    """A pydantic error's place as a JSON key path: `rows[0].report_dir`, `counts.hung`.
    With the `data` that was parsed, a step of the place that is not in it is left out: the
    name pydantic gives a member of a union (a stack frame read as `inlined`); the last
    step stays when it is a key found `missing`."""
    out, here = "", data
    for i, part in enumerate(loc):
        if part == "[key]":  # the key itself is wrong: its path is the key's
            continue
        if data is not _ABSENT and not (missing and i == len(loc) - 1):
            step = _step(here, part)
            if step is _ABSENT:
                continue  # not a step into the data: a union member's name
            here = step
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def _step(value: object, part: str | int) -> object:
    """value[part] when the data has it, else _ABSENT."""
    if isinstance(value, dict):
        return value.get(part, _ABSENT)
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return value[part]
    return _ABSENT


def validation_line(exc: ValidationError, root: str = "", data: object = _ABSENT) -> str:
    """A JSON value's first wrong part, in one line, its path under `root`:
    `counts.hang: must be >= 0, not -1`."""
    first = exc.errors()[0]
    missing = first["type"] == "missing"
    where = ".".join(p for p in (root, json_path(first["loc"], data, missing)) if p)
    return f"{where}: {json_wrong(first)}" if where else json_wrong(first)


# pydantic's error types for a value of the wrong JSON type, and what was expected there
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "tuple_type": "an array",
    "dict_type": "an object",
    "dataclass_type": "an object",
    "dataclass_exact_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "path_type": "a path",
}


def json_type(value: object) -> str:
    """What a JSON value is, in words: `a number`, `an array`."""
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "an array"))
    return next((name for t, name in kinds if isinstance(value, t)), "an object")


def json_wrong(error: ErrorDetails) -> str:
    """What is wrong with one JSON value, in the words of JSON (an array, an object, null):
    `expected a number, found a string`; bounds and the rest as configs say them
    (`schema_errors.what_is_wrong`)."""
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        last = error["loc"][-1] if error["loc"] else ""
        return "the array is too short" if isinstance(last, int) else "a required key is missing"
    if kind == "json_invalid":  # the text parse: the data came from Python's json, so rare
        return f"a value pydantic cannot read: {(error.get('ctx') or {}).get('error', '')}"
    if value is None and (kind in _EXPECTED or kind in ("enum", "literal_error")):
        return "null where a value is required"  # a limit, a list, a word: damage, not data
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, found {json_type(value)}"
    if kind == "finite_number":
        return f"{value} is not a finite number"
    if kind in ("enum", "literal_error"):
        words = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        return f"{json.dumps(value)[:60]} is not one of {', '.join(words)}"
    if kind == "union_tag_invalid":
        return "not a kind of value this harness knows"
    return what_is_wrong(error)
