"""The building blocks of the config schemas (pydantic v2): a strict base model (no
coercion: `true` is not 1, "gcc" is not a list; unknown keys refused; no inf or nan), and the
value types every config shares: seconds, counts, lists and tables of strings, compiled
regexes, relative paths that stay inside their tree, templates with known placeholders,
words of a vocabulary. Each error is phrased once here, as the user will read it."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic import Strict as StrictFlag
from pydantic_core import PydanticCustomError

from harness.config.schema_errors import show


class Strict(BaseModel):
    """A config table: strict types, unknown keys refused, values finite."""

    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, allow_inf_nan=False, validate_default=False
    )


def fail(text: str) -> PydanticCustomError:
    """A validation error whose message is `text` as written (braces included)."""
    return PydanticCustomError("harness", "{text}", {"text": text})


def _str_list(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(f"expected a list of strings, not {show(value)}")
    return value


def _str_map(value: Any) -> Any:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise fail(f'expected a table of strings (NAME = "value"), not {show(value)}')
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        raise fail(f"bad regex {show(value)}: {exc}") from None
    return value


def _relative(value: str) -> str:
    """A path inside the tree it is read against: relative, no `..`, no NUL."""
    if not value or "\0" in value or "\\" in value:
        raise fail(f"expected a relative path, not {show(value)}")
    path = PurePosixPath(value)
    if path.is_absolute() or value.startswith("~"):
        raise fail(f"must be a path relative to the tree, not the absolute {show(value)}")
    if ".." in path.parts:
        raise fail(f"must stay inside the tree (no '..'), not {show(value)}")
    return value


def _nonempty(value: str) -> str:
    if not value.strip():
        raise fail("must not be empty")
    return value


# at most 30 days: a finite but huge timeout (1e300) would overflow the timeouts of
# subprocess and threading (OverflowError) after the tree is prepared
MAX_SECONDS = 30 * 24 * 3600.0
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _plain_name(value: str) -> str:
    # pin and env names become folder names (the build cache, logs/<env>): a name, not a path
    if not _PLAIN.fullmatch(value):
        raise fail(
            f"{value!r} is not a plain name (letters, digits, '_', '.', '+', '-'; "
            "not starting with '.' or '-')"
        )
    return value


Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
Count = Annotated[int, Field(gt=0)]
Number = Annotated[float, Field(allow_inf_nan=False)]
Text = Annotated[str, AfterValidator(_nonempty)]
StrList = Annotated[list[str], BeforeValidator(_str_list)]
StrMap = Annotated[dict[str, str], BeforeValidator(_str_map)]
Regex = Annotated[str, AfterValidator(_regex)]
RelPath = Annotated[str, AfterValidator(_relative)]
PlainName = Annotated[str, AfterValidator(_plain_name)]
NameList = Annotated[list[PlainName], BeforeValidator(_str_list)]


def _placeholders(allowed: tuple[str, ...]) -> Callable[[str], str]:
    """A shell command template: `{name}` must be one of `allowed`; `${VAR}`, `{ a; }` and
    `{a,b}` are the shell's own and stay as written (harness.config.pin.render)."""
    rx = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")

    def check(value: str) -> str:
        unknown = sorted({m[1] for m in rx.finditer(value)} - set(allowed))
        if unknown:
            names = ", ".join("{" + n + "}" for n in allowed)
            raise fail(f"unknown placeholder {{{unknown[0]}}} (this template takes {names})")
        return value

    return check


def _format_fields(allowed: tuple[str, ...]) -> Callable[[str], str]:
    """A str.format template (config files, probe headers): only `{env}`."""
    formatter = string.Formatter()

    def check(value: str) -> str:
        try:
            fields = [(n, s, c) for _, n, s, c in formatter.parse(value) if n is not None]
        except ValueError as exc:
            raise fail(f"bad template {show(value)}: {exc}") from None
        for name, spec, conversion in fields:
            if name not in allowed or spec or conversion:
                names = ", ".join("{" + n + "}" for n in allowed)
                raise fail(f"unknown placeholder {{{name}}} in {show(value)} (only {names})")
        return value

    return check


BuildTemplate = Annotated[str, AfterValidator(_nonempty), AfterValidator(_placeholders(("env",)))]
RunTemplate = Annotated[
    str, AfterValidator(_nonempty), AfterValidator(_placeholders(("env", "steps", "tree")))
]
EnvPath = Annotated[str, AfterValidator(_format_fields(("env",))), AfterValidator(_relative)]


# a vocabulary word is written as a TOML string: `Annotated[Mechanism, WORD]` takes the
# string (and only a string that is a member) where strict mode would want the enum itself
WORD = StrictFlag(False)


def one_of(words: Callable[[], tuple[str, ...]], what: str) -> Callable[[str], str]:
    """A string that must be one of a registry's names (looked up when validated)."""

    def check(value: str) -> str:
        known = words()
        if value not in known:
            raise fail(f"unknown {what} {value!r} (known: {', '.join(known)})")
        return value

    return check


def schema_version(expected: int) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value != expected:
            raise fail(f"schema_version {value!r} is not supported (expected {expected})")
        return value

    return check
