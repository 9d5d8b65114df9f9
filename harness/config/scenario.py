"""Scenarios (scenarios/<name>.toml): what to run for an env and what to expect of it,
as data. The schema is documented in docs/scenario-schema.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from harness.config.checkspec import CheckModel
from harness.config.fields import (
    Count,
    EnvPath,
    Number,
    Seconds,
    Strict,
    StrList,
    StrMap,
    Text,
    schema_version,
)
from harness.config.pin import project_root
from harness.config.schema_errors import is_config_file, is_file_name, read_toml, validate
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


class RunTable(Strict):
    """[defaults] and each [pin.<name>]: the run settings (a pin's table over the defaults)."""

    steps: Count | None = None
    startup_s: Seconds | None = None
    stall_s: Seconds | None = None
    timeout_s: Seconds | None = None
    upstream_env: Text | None = None
    args: StrList | None = None
    env: StrMap | None = None
    config_files: list[EnvPath] | None = None


Bounds = Annotated[list[Number], Field(min_length=2, max_length=2)]


class ProbeBounds(Strict):
    """[probe]: what `harness probe ENV` expects of the env's rewards."""

    raw_min: Number | None = None
    raw_max: Number | None = None
    expect_raw_above: Number | None = None
    log: dict[str, Bounds] = Field(default_factory=dict)  # Log field → [low, high]


class ScenarioModel(Strict):
    """scenarios/<name>.toml."""

    schema_version: Annotated[int, AfterValidator(schema_version(SCENARIO_SCHEMA_VERSION))]
    env: Text
    description: str = ""
    defaults: RunTable = RunTable()
    pin: dict[str, RunTable] = Field(default_factory=dict)
    probe: ProbeBounds | None = None
    checks: list[CheckModel] = Field(default_factory=list)


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
        # each table was validated at load; what only the merge can tell is a missing key
        missing = [k for k in ("steps", "startup_s", "stall_s", "timeout_s") if k not in merged]
        if missing:
            raise HarnessError(
                f"{self.file.name}: no {', '.join(missing)} for pin {pin} "
                f"(set it in [defaults] or [pin.{pin}])",
                USAGE,
            )
        return RunSettings(
            steps=int(merged["steps"]),
            startup_s=float(merged["startup_s"]),
            stall_s=float(merged["stall_s"]),
            timeout_s=float(merged["timeout_s"]),
            upstream_env=str(merged.get("upstream_env", self.env)),
            args=tuple(merged.get("args", ())),
            env=dict(merged.get("env", {})),
            config_files=tuple(merged["config_files"]) if "config_files" in merged else None,
        )


def scenario_dir() -> Path:
    return project_root() / "scenarios"


def available_scenarios() -> list[str]:
    return sorted(p.stem for p in scenario_dir().glob("*.toml"))


def _scenario_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".toml":
        return path
    if not is_file_name(name_or_path):
        raise HarnessError(
            f"scenario {name_or_path!r}: a scenario is a name of a file in {scenario_dir()}, "
            "or a path ending in .toml",
            USAGE,
        )
    return scenario_dir() / f"{name_or_path}.toml"


def load_scenario(name_or_path: str) -> Scenario:
    path = _scenario_path(name_or_path)
    if not is_config_file(path):
        known = ", ".join(available_scenarios())
        raise HarnessError(f"unknown env or scenario {name_or_path!r} (known: {known})", USAGE)
    data = read_toml(path)
    model = validate(ScenarioModel, data, path.name)
    return Scenario(
        name=path.stem,
        env=model.env,
        description=model.description,
        file=path,
        defaults=dict(data.get("defaults", {})),
        per_pin={str(k): dict(v) for k, v in data.get("pin", {}).items()},
        checks=[dict(c) for c in data.get("checks", [])],
        raw=data,
    )
