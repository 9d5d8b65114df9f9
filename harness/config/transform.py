"""Fix transforms as data (upstream_pin/fixes/<name>.toml): which functions, in which files,
and which pragma lines a source transform neutralizes (harness.variants applies them).

A transform is named, never pathed: the name is resolved against the fixes folder only, and
the files it lists are relative paths inside the tree it is applied to. Both are checked
here, at load, before anything is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from harness.config.fields import Regex, RelPath, Strict, Text, fail
from harness.config.pin import pin_dir
from harness.config.schema_errors import is_file_name, one_line, read_toml, validate
from harness.contain import confined
from harness.errors import HarnessError
from harness.outcome import USAGE

DEFAULT_PRAGMA = r"^\s*#\s*pragma\s+omp\b"


@dataclass(frozen=True)
class TransformTarget:
    function: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Transform:
    name: str
    description: str
    pragma: re.Pattern[str]
    targets: tuple[TransformTarget, ...]


def _identifier(value: str) -> str:
    if not value.isidentifier():
        raise fail(f"expected a C function name, not {value!r}")
    return value


class TargetModel(Strict):
    """One function whose OpenMP pragmas are neutralized, and the files it may be in."""

    function: Annotated[str, AfterValidator(_identifier)]
    files: Annotated[list[RelPath], Field(min_length=1)]


class TransformModel(Strict):
    """upstream_pin/fixes/<name>.toml."""

    name: Text
    description: str = ""
    pragma: Regex = DEFAULT_PRAGMA
    targets: Annotated[list[TargetModel], Field(min_length=1)]


def transform_dir() -> Path:
    return pin_dir() / "fixes"


def check_name(name: str) -> None:
    """A transform name is a name: no separators, no `..`, no leading dot."""
    if not is_file_name(name) or ".." in name:
        raise HarnessError(
            one_line(
                f"variant omp-free:{name}: a transform is a name of a file in "
                f"{transform_dir()}, not a path"
            ),
            USAGE,
        )


def available_transforms() -> list[str]:
    return sorted(p.stem for p in transform_dir().glob("*.toml"))


def load_transform(name: str) -> Transform:
    """The transform `name` (upstream_pin/fixes/<name>.toml), validated."""
    check_name(name)
    # the fixes folder only: a link in it that leads out of it is refused
    path = confined(transform_dir(), f"{name}.toml", what=f"variant omp-free:{name}")
    if not path.is_file():
        known = ", ".join(available_transforms()) or "none"
        message = f"variant omp-free:{name}: unknown transform (known: {known})"
        raise HarnessError(one_line(message), USAGE)
    return transform_from_file(path)


def transform_from_file(path: Path) -> Transform:
    model = validate(TransformModel, read_toml(path), path.name)
    return Transform(
        name=model.name,
        description=model.description,
        pragma=re.compile(model.pragma),
        targets=tuple(TransformTarget(t.function, tuple(t.files)) for t in model.targets),
    )
