"""Scenarios (scenarios/<name>.toml): what to run for an env and what to expect of it,
as data. The schema is documented in docs/scenario-schema.md."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.pin import project_root
from harness.errors import HarnessError
from harness.outcome import USAGE

SCENARIO_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunSettings:
    steps: int
    startup_s: float
    stall_s: float
    timeout_s: float
    upstream_env: str  # the env's name for this pin (e.g. puffer_breakout for 3.0)
    args: tuple[str, ...] = ()  # extra trainer arguments for this pin
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the trainer
    config_files: tuple[str, ...] | None = None  # overrides the pin's, for config checks


@dataclass(frozen=True)
class Scenario:
    name: str
    env: str
    description: str
    file: Path
    defaults: dict[str, Any]
    per_pin: dict[str, dict[str, Any]]
    checks: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def pins(self) -> list[str]:
        return sorted(self.per_pin)

    def settings(self, pin: str | Sequence[str]) -> RunSettings:
        """The run settings for a pin, given by name or by its lineage (the pin's name, then
        the pins it extends): [pin.<ancestor>] tables apply farthest first, the pin's own
        last, so a pin that extends the replica runs the replica's scenarios as shipped."""
        lineage = (pin,) if isinstance(pin, str) else tuple(pin)
        pin = lineage[0]
        tables = [self.per_pin[name] for name in reversed(lineage) if name in self.per_pin]
        if not tables:
            raise HarnessError(
                f"scenario {self.name} has no settings for pin {pin} "
                f"(it covers: {', '.join(self.pins()) or 'none'})",
                USAGE,
            )
        merged = dict(self.defaults)
        for table in tables:
            merged.update(table)
        for key in ("startup_s", "stall_s", "timeout_s"):
            value = merged.get(key)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise HarnessError(
                    f"{self.file.name}: {key} for pin {pin} must be a finite number > 0, "
                    f"not {value!r}",
                    USAGE,
                )
        try:
            return RunSettings(
                steps=int(merged["steps"]),
                startup_s=float(merged["startup_s"]),
                stall_s=float(merged["stall_s"]),
                timeout_s=float(merged["timeout_s"]),
                upstream_env=str(merged.get("upstream_env", self.env)),
                args=tuple(str(a) for a in merged.get("args", ())),
                env={str(k): str(v) for k, v in merged.get("env", {}).items()},
                config_files=(
                    tuple(str(f) for f in merged["config_files"])
                    if "config_files" in merged
                    else None
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HarnessError(f"{self.file.name}: bad run settings for pin {pin}: {exc}") from exc


def scenario_dir() -> Path:
    return project_root() / "scenarios"


def available_scenarios() -> list[str]:
    return sorted(p.stem for p in scenario_dir().glob("*.toml"))


def load_scenario(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = scenario_dir() / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(available_scenarios())
        raise HarnessError(f"unknown env or scenario {name_or_path!r} (known: {known})", USAGE)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path.name}: malformed TOML: {exc}", USAGE) from exc
    if data.get("schema_version") != SCENARIO_SCHEMA_VERSION:
        raise HarnessError(
            f"{path.name}: schema_version {data.get('schema_version')!r} is not supported "
            f"(expected {SCENARIO_SCHEMA_VERSION})",
            USAGE,
        )
    from harness.config.checkspec import validate

    validate(data.get("checks", []), path.name)
    try:
        return Scenario(
            name=path.stem,
            env=str(data["env"]),
            description=str(data.get("description", "")),
            file=path,
            defaults=dict(data.get("defaults", {})),
            per_pin={
                str(k): _table(v, f"{path.name} [pin.{k}]") for k, v in data.get("pin", {}).items()
            },
            checks=list(data.get("checks", [])),
            raw=data,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise HarnessError(f"{path.name}: malformed scenario: {exc}", USAGE) from exc


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise HarnessError(f"{where}: expected a table", USAGE)
    return dict(value)
