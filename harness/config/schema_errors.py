"""Reading a config file and saying what is wrong with it: the bytes as UTF-8 TOML (size and
nesting bounded), and pydantic's validation errors as one line each, prefixed with the file
name and the key path (`replica.toml: [build] tools: expected a list of strings, not "gcc"`).

Several errors make ONE message on ONE line: the first error in full, then
`(and N more: <their key paths>)`, because the CLI prints a HarnessError as one line. Fix the
first, run again, and the next one is in full.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
import tomllib
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from harness.errors import HarnessError
from harness.outcome import USAGE

MAX_BYTES = 1 << 20  # a config file is a page of text; a bigger one is a mistake
MAX_DEPTH = 12  # deeper than any schema goes: tables of tables of … are refused, not walked
M = TypeVar("M", bound=BaseModel)
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def one_line(text: str, limit: int = 300) -> str:
    """`text` with control characters (newlines included) shown as spaces, and shortened."""
    flat = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def is_file_name(name: str) -> bool:
    """A config named as a file of its folder (a pin, a scenario, a transform), not a path:
    no separator, no NUL, no leading dot."""
    return bool(name) and not any(c in name for c in "/\\\0") and not name.startswith(".")


def is_config_file(path: Path) -> bool:
    """`path` is a file; False for a name the OS refuses (a NUL byte, too long)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML table of `path`; a one-line usage error naming the file when it is not
    readable, not UTF-8, not TOML, too large or nested too deeply."""
    name = one_line(path.name)
    try:
        # O_NONBLOCK: a FIFO named as a config must not wait for a writer; a link is
        # followed (a user's pin may be one), but only a regular file is read
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise HarnessError(f"{name}: not a regular file", USAGE)
            os.set_blocking(handle.fileno(), True)
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise HarnessError(f"{name}: cannot read: {exc.strerror or exc}", USAGE) from None
    if len(raw) > MAX_BYTES:
        raise HarnessError(f"{name}: larger than {MAX_BYTES // 1024} KiB: not a config", USAGE)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(
            f"{name}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", USAGE
        ) from None
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise HarnessError(f"{name}: malformed TOML: nested too deeply", USAGE) from None
    except ValueError as exc:  # TOMLDecodeError, and the odd value error of a datetime
        raise HarnessError(f"{name}: malformed TOML: {one_line(str(exc))}", USAGE) from None
    deep = too_deep(data, MAX_DEPTH)
    if deep is not None:
        raise HarnessError(
            f"{name}: {render_loc(deep)}: nested deeper than {MAX_DEPTH} levels", USAGE
        )
    return data


def too_deep(data: Any, limit: int) -> tuple[str | int, ...] | None:
    """The key path of the first value nested deeper than `limit`, else None (no recursion:
    the data may be as deep as tomllib could go)."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if len(loc) > limit:
            return loc
        if isinstance(value, Mapping):
            stack += [(v, (*loc, str(k))) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, (*loc, i)) for i, v in enumerate(value)]
    return None


def validate(model: type[M], data: Mapping[str, Any], where: str, *, partial: bool = False) -> M:
    """`data` as `model`, or ONE usage error naming `where` and the key path of each problem.
    `partial`: a file that extends another may leave required keys to it."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if not (partial and e["type"] == "missing")]
        if not errors:
            return model.model_construct()
        raise HarnessError(message(model, errors, where), USAGE) from None


def check_partial(model: type[BaseModel], data: Mapping[str, Any], where: str) -> None:
    """Types, ranges and unknown keys of one file of a pin that extends another."""
    validate(model, data, where, partial=True)


def message(model: type[BaseModel], errors: Sequence[ErrorDetails], where: str) -> str:
    """The first error in full (an unknown key first: a typo often explains the rest), then
    how many more and where."""
    ordered = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")
    first = f"{where}: {describe(model, ordered[0])}"
    if len(ordered) == 1:
        return one_line(first, 600)
    places = list(dict.fromkeys(render_loc(_key_loc(e)) for e in ordered[1:]))
    shown = ", ".join(places[:4]) + (", …" if len(places) > 4 else "")
    return one_line(f"{first} (and {len(ordered) - 1} more: {shown})", 600)


def describe(model: type[BaseModel], error: ErrorDetails) -> str:
    """One error as `<key path>: <what is wrong>` (unknown and missing keys: a sentence)."""
    kind, loc = error["type"], _key_loc(error)
    if kind == "extra_forbidden":
        key, table = loc[-1], render_table(loc[:-1])
        known = sorted(_fields_at(model, loc[:-1]))
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        inside = f" in {table}" if table else ""
        return f"unknown key {show_key(key)}{inside}{hint}"
    if kind == "missing":
        table = render_table(loc[:-1])
        return f"missing required key {show_key(loc[-1])}" + (f" in {table}" if table else "")
    text = what_is_wrong(error)
    return f"{render_loc(loc)}: {text}" if loc else text


def _key_loc(error: ErrorDetails) -> tuple[str | int, ...]:
    # a dict key's own error carries a trailing "[key]": the key itself is the path
    return tuple(p for p in error["loc"] if p != "[key]")


def what_is_wrong(error: ErrorDetails) -> str:
    """What is wrong with one value, in words: `expected a number, not "600"`."""
    kind, value = error["type"], error.get("input")
    ctx = error.get("ctx") or {}
    got = f", not {show(value)}"
    plain = {
        "string_type": "expected a string",
        "int_type": "expected an integer",
        "float_type": "expected a number",
        "bool_type": "expected true or false",
        "list_type": "expected a list",
        "dict_type": "expected a table",
        "model_type": "expected a table",
        "model_attributes_type": "expected a table",
        "finite_number": "expected a finite number",
        "string_too_short": "must not be empty",
    }
    if kind in plain:
        return plain[kind] + got
    if kind in ("enum", "literal_error"):
        words = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"{value!r} is not one of {', '.join(words)}"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<"}
    if kind in bounds:
        bound = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {_number(bound)}{got}"
    if kind == "less_than_equal":
        return f"must be <= {_number(ctx.get('le'))}{got}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length')} entries{got}"
    if kind == "too_long":
        return f"expected at most {ctx.get('max_length')} entries{got}"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if kind.startswith("harness"):  # our own errors say it all
        return str(error["msg"])
    msg = str(error["msg"])
    return f"{msg[:1].lower()}{msg[1:]}{got}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def show(value: Any, limit: int = 60) -> str:
    """A value as it would be written in TOML, shortened."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and not math.isfinite(value):
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    else:
        try:
            text = json.dumps(value, ensure_ascii=True, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show_key(key: str | int) -> str:
    return repr(str(key)) if isinstance(key, str) else str(key)


def _bare(name: str | int) -> str:
    text = str(name)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=True)


def render_table(loc: Sequence[str | int]) -> str:
    """`[build]`, `[pin."pufferlib-5.0"]`, `[[checks]] #2`, `[[causes]] #1 params`; "" for the
    top level."""
    parts = list(loc)
    last = max((i for i, p in enumerate(parts) if isinstance(p, int)), default=-1)
    if last >= 0:
        names = ".".join(_bare(p) for p in parts[:last] if isinstance(p, str))
        head = f"[[{names}]] #{int(parts[last]) + 1}"
        rest = ".".join(_bare(p) for p in parts[last + 1 :])
        return f"{head} {rest}" if rest else head
    return f"[{'.'.join(_bare(p) for p in parts)}]" if parts else ""


def render_loc(loc: Sequence[str | int]) -> str:
    """A key path: `envs`, `[build] tools`, `[[checks]] #2 key`, `[files] "/etc/shadow"`
    (indices inside a list of values are left out: the value is shown)."""
    parts = list(loc)
    while parts and isinstance(parts[-1], int) and not _is_table_array(parts):
        parts.pop()
    if not parts:
        return "(top level)"
    if isinstance(parts[-1], int):
        return render_table(parts)
    table = render_table(parts[:-1])
    key = _bare(parts[-1])
    if re.search(r"#\d+ ", table):  # [[causes]] #1 params → [[causes]] #1 params.regex
        return f"{table}.{key}"
    return f"{table} {key}" if table else key


def _is_table_array(parts: Sequence[str | int]) -> bool:
    # `[[checks]] #2` as a whole is a table; `tools[1]` is a value in a list
    return len(parts) >= 2 and isinstance(parts[-2], str) and parts[-2] in _TABLE_ARRAYS


_TABLE_ARRAYS = frozenset(
    {"checks", "causes", "signatures", "hints", "targets", "runtime", "output"}
)


def _fields_at(model: type[BaseModel], loc: Sequence[str | int]) -> set[str]:
    """The keys the model allows at `loc` (for a near-miss suggestion); empty if unknown."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return set()
            tp = field.annotation
            continue
        args = typing.get_args(tp)
        origin = typing.get_origin(tp)
        if origin in (list, tuple) and args:
            tp = args[0]
        elif origin is dict and len(args) == 2:
            tp = args[1]
        else:
            return set()
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return set(tp.model_fields)
    return set()


def _unwrap(tp: Any) -> Any:
    """The model or container inside Annotated[...] and X | None."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, _UnionType) and len(args) == 1:
            tp = args[0]
            continue
        return tp


_UnionType = type(int | None)
