"""Host profiles as data (hosts/<name>.toml): the conditions of a host where a hang shows
(a container's one CPU, a CPU quota, a memory limit, a noisy neighbour, environment presets),
named so that `harness run --host NAME` reproduces them here (docs/hosts.md).

A profile is named, never pathed: the name is resolved against the hosts folder only. The
value grammars (`--cpus`, `--memory`) are defined here once: the command line and the
profiles read them with the same functions (harness.execute.conditions resolves a CPU count
against the CPUs this process may use)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from harness.config.fields import Strict, StrMap, fail
from harness.config.pin import project_root
from harness.config.schema_errors import is_config_file, one_line, read_toml, show, validate
from harness.errors import HarnessError
from harness.outcome import USAGE

MAX_CPU = 4095  # CPU numbers above this are a typo, not a host
MAX_LOAD = 64  # busy processes of the noisy neighbour: more is a fork bomb, not a host
MAX_QUOTA = 1024.0  # CPUs of bandwidth
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_SIZE = re.compile(r"(\d+)\s*([KMGT]?)(i?B?)", re.I)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


# ---------------------------------------------------------------- the value grammars


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """`0,2-3` → (0, 2, 3); `2,` → (2,) (a trailing comma marks a one-CPU list). ValueError
    with a sentence when malformed."""
    cpus: set[int] = set()
    parts = [p.strip() for p in text.split(",")]
    if parts and not parts[-1] and len(parts) > 1:
        parts.pop()
    for part in parts:
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (e.g. 0,2-3)")
        first, last = int(lo), int(hi) if dash else int(lo)
        if first > last or last > MAX_CPU:
            raise ValueError(f"not a CPU range: {part!r} in {text!r}")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def parse_cpus(text: str) -> int | tuple[int, ...]:
    """`--cpus`: a plain number N is a count (the first N CPUs this process may use); a list
    (`0,2-3`, `1-1`, `3,`) names the CPUs."""
    text = text.strip()
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= MAX_CPU + 1:
            raise ValueError(f"a CPU count must be between 1 and {MAX_CPU + 1}, not {text}")
        return count
    return parse_cpu_list(text)


def format_cpus(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 3) → `0-1,3`; one CPU → `2-2` (a plain `2` would read as a count)."""
    runs: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(f"{ordered[i]}-{ordered[j]}" if j > i or len(ordered) == 1 else f"{ordered[i]}")
        i = j + 1
    return ",".join(runs)


def parse_size(text: str) -> int:
    """`512M`, `1G`, `64MiB`, `1048576` → bytes (binary units: M is MiB)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None or (m[3] and not m[2] and m[3].lower() != "b"):
        raise ValueError(f"not a size: {text!r} (e.g. 512M, 2G, 64MiB)")
    value = int(m[1]) * _UNITS[m[2].upper()]
    if value < 1 << 20:
        raise ValueError(f"a memory limit below 1 MiB is not a host: {text!r}")
    return value


def format_size(size: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size / (1 << 20):.1f} MiB"


def _cpus(value: object) -> object:
    # before the type check: one sentence for both forms, not one error per union member
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise fail(f'expected a CPU count or a CPU list such as "0,2-3", not {show(value)}')
    try:
        parse_cpus(str(value))
    except ValueError as exc:
        raise fail(str(exc)) from None
    return value


def _size(value: str) -> str:
    try:
        parse_size(value)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return value


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise fail("expected a finite number")
    return value


class HostProfileModel(Strict):
    """hosts/<name>.toml."""

    description: str = ""
    # a count (the first N CPUs this process may use) or a CPU list as `--cpus` takes it
    cpus: Annotated[int | str, BeforeValidator(_cpus)] | None = None
    cpu_quota: Annotated[float, Field(gt=0, le=MAX_QUOTA), AfterValidator(_finite)] | None = None
    memory: Annotated[str, AfterValidator(_size)] | None = None
    load: Annotated[int, Field(ge=0, le=MAX_LOAD)] = 0
    env: StrMap = Field(default_factory=dict)


@dataclass(frozen=True)
class HostProfile:
    name: str
    file: Path
    description: str = ""
    cpus: int | tuple[int, ...] | None = None  # a count or the CPUs themselves
    cpu_quota: float | None = None
    memory_bytes: int | None = None
    load: int = 0
    env: dict[str, str] = field(default_factory=dict)


def hosts_dir() -> Path:
    return project_root() / "hosts"


def host_names(folder: Path | None = None) -> list[str]:
    where = folder or hosts_dir()
    try:
        return sorted(p.stem for p in where.glob("*.toml") if is_config_file(p))
    except OSError:
        return []


def check_name(name: str, folder: Path | None = None) -> str:
    """`name` as a profile name (no separator, no `..`, no leading dot), else one line."""
    if not _NAME.fullmatch(name) or ".." in name:
        known = ", ".join(host_names(folder)) or "none"
        raise HarnessError(
            f"--host {one_line(name, 80)!r}: a host profile is named, not pathed "
            f"(hosts/NAME.toml; known: {known})",
            USAGE,
        )
    return name


def load_host(name: str, folder: Path | None = None) -> HostProfile:
    """hosts/<name>.toml (or `folder`/<name>.toml), validated; one-line usage errors."""
    check_name(name, folder)
    where = folder or hosts_dir()
    path = where / f"{name}.toml"
    if not is_config_file(path):
        known = ", ".join(host_names(folder)) or "none"
        raise HarnessError(f"--host {name!r}: no such host profile (known: {known})", USAGE)
    model = validate(HostProfileModel, read_toml(path), f"hosts/{path.name}")
    return HostProfile(
        name=name,
        file=path,
        description=model.description,
        cpus=None if model.cpus is None else parse_cpus(str(model.cpus)),
        cpu_quota=model.cpu_quota,
        memory_bytes=None if model.memory is None else parse_size(model.memory),
        load=model.load,
        env=dict(model.env),
    )
