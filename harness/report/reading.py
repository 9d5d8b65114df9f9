"""Bounded reads of a saved report's folder: report.json and every evidence file are
resolved inside the folder and read as regular files (`harness.contain`: no FIFO, device or
link out), at most a size cap, JSON at most `MAX_DEPTH` deep, report.json's schema_version
one this harness reads. Each refusal is one `HarnessError` line with the USAGE exit code.
What the bytes then mean is `report.load`'s business."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from harness.config.schema_errors import what_is_wrong
from harness.contain import confined, read_regular
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import USAGE
from harness.report.model import SCHEMA_VERSION

REPORT_JSON_LIMIT = 64 * 1024 * 1024  # report.json: a long run's is a few MB (its samples)
EVIDENCE_LIMIT = 64 * 1024 * 1024  # one evidence file (the pin, the scenario, a config file)
MAX_DEPTH = 64  # JSON nesting: a report is about 8 deep (samples → stacks → frames → inline)
SCHEMA_VERSIONS_READ = tuple(range(1, SCHEMA_VERSION + 1))


def read_report_json(path: Path) -> tuple[Path, dict[str, Any]]:
    """report.json (of a folder, or the file) read bounded and checked for nesting and its
    schema_version: (its path, its object). Not yet mapped onto the model."""
    report_json = path / REPORT_JSON if path.is_dir() else path
    if not report_json.exists() and not report_json.is_symlink():
        where = f"{path} has no report.json" if path.is_dir() else f"{path}: no such file"
        raise HarnessError(f"not a harness report: {where}", USAGE)
    data = read_json(
        report_json.parent, report_json.name, "not a harness report", REPORT_JSON_LIMIT
    )
    if not isinstance(data, dict):
        raise HarnessError(f"{report_json}: not a harness report: not a JSON object", USAGE)
    check_schema_version(data, report_json)
    return report_json, data


def read_bytes(folder: Path, rel: str, what: str, limit: int) -> bytes:
    """A file of a report folder: `rel` resolved inside `folder`, a regular file, at most
    `limit` bytes; else one line naming it (`what`: which file of the report it is)."""
    label = f"{folder}: {what}"
    return read_regular(confined(folder, rel, what=label), what=label, limit=limit)


def read_json(folder: Path, rel: str, what: str, limit: int = EVIDENCE_LIMIT) -> Any:
    """A JSON file of a report folder, read as `read_bytes` does and parsed: UTF-8, nesting
    at most MAX_DEPTH. `what` says what the file is in any error."""
    raw = read_bytes(folder, rel, what, limit)  # bounded before it is parsed
    where = f"{folder / rel}: {what}"
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise HarnessError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, an int of 5000 digits
        raise HarnessError(f"{where}: not valid JSON: {exc}", USAGE) from None
    _check_depth(data, where)
    return data


T = TypeVar("T")
# pydantic's reader and writer of a dataclass, by its qualified name, built on first use:
# one costs tens of ms, and every harness start imports the modules that use them
_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def adapter(cls: type[T]) -> TypeAdapter[T]:
    key = f"{cls.__module__}.{cls.__qualname__}"
    found = _ADAPTERS.get(key)
    if found is None:
        found = _ADAPTERS[key] = TypeAdapter(cls)
    return found


def parse(cls: type[T], data: object, root: str = "") -> T:
    """JSON data (already read, bounded, nesting checked) as `cls`, strictly as JSON means
    it: a string is no number, true is no integer, a path and a vocabulary word are strings.
    The one way report.json, triage.json and repeat.json are read. The data goes to pydantic
    as JSON text again (pydantic's Python mode would take "600" as a number, or refuse a
    word for its enum); NaN and ±Infinity as Python's json reads them. A ValueError says the
    first wrong value in one line, its key path under `root` (validation_line), or what the
    model's own checks refuse."""
    try:
        text = json.dumps(data, allow_nan=True)
    except (TypeError, ValueError) as exc:  # not JSON data: a caller's mistake, said plainly
        raise ValueError(f"not JSON data: {exc}") from None
    try:
        return adapter(cls).validate_json(text, strict=True)
    except ValidationError as exc:
        raise ValueError(validation_line(exc, root)) from None


def json_path(loc: Sequence[str | int]) -> str:
    """A pydantic error's place as a JSON key path: `rows[0].report_dir`, `counts.hung`."""
    out = ""
    for part in loc:
        if part == "[key]":  # the key itself is wrong: its path is the key's
            continue
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".")


def validation_line(exc: ValidationError, root: str = "") -> str:
    """A JSON value's first wrong part, in one line, its path under `root`:
    `counts.hang: must be >= 0, not -1`."""
    first = exc.errors()[0]
    where = ".".join(p for p in (root, json_path(first["loc"])) if p)
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
        return "a required key is missing"
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


def _check_depth(data: Any, where: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH (iteratively: a deep value must not be
    walked by recursion here either)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise HarnessError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack += [(v, depth + 1) for v in items if isinstance(v, dict | list)]


def check_schema_version(data: dict[str, Any], report_json: Path) -> None:
    """report.json's schema_version is one this harness reads (absent: the first)."""
    version = data.get("schema_version", 1)
    reads = ", ".join(map(str, SCHEMA_VERSIONS_READ))
    if isinstance(version, bool) or not isinstance(version, int):
        raise HarnessError(f"{report_json}: schema_version {json.dumps(version)} is not a number")
    if version > max(SCHEMA_VERSIONS_READ):
        raise HarnessError(
            f"{report_json}: report.json schema_version {version} is newer than this harness "
            f"reads ({reads}): read it with a newer harness"
        )
    if version not in SCHEMA_VERSIONS_READ:
        raise HarnessError(
            f"{report_json}: report.json schema_version {version} is unknown "
            f"(this harness reads {reads})"
        )
