"""The shape of a scenario's [[checks]] entries, validated when the scenario loads: a bad
scenario must fail in a second, not after a ten-minute run. harness.analysis.checks
evaluates them, one checker per kind listed here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.errors import HarnessError
from harness.outcome import USAGE

KINDS = ("required", "range", "finite", "config", "steps_reached")


def validate(specs: Iterable[Mapping[str, Any]], where: str) -> None:
    """Reject unknown kinds, missing fields and mistyped values before anything runs: a bad
    scenario must fail in a second, not after a ten-minute run."""
    needs = {
        "required": ("keys",),
        "range": (),
        "finite": ("keys",),
        "config": ("section", "key"),
        "steps_reached": (),
    }
    for spec in specs:
        if not isinstance(spec, Mapping):
            raise HarnessError(f"{where}: each [[checks]] entry must be a table", USAGE)
        name = f"{where}: check {spec.get('name', spec.get('kind'))!r}"
        kind = spec.get("kind")
        if kind not in KINDS:
            raise HarnessError(
                f"{where}: unknown check kind {kind!r} (known: {', '.join(KINDS)})", USAGE
            )
        missing = [f for f in needs[kind] if f not in spec]
        if kind == "range" and "key" not in spec and "keys" not in spec:
            missing.append("key")
        if missing:
            raise HarnessError(f"{name} needs {', '.join(missing)}", USAGE)
        _typed(spec, name)


def _typed(spec: Mapping[str, Any], name: str) -> None:
    numbers = ("min", "max", "fraction")
    for field_name in numbers:
        value = spec.get(field_name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise HarnessError(f"{name}: {field_name} must be a number, not {value!r}", USAGE)
    for field_name in ("keys", "pins", "per_epoch"):
        value = spec.get(field_name)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise HarnessError(f"{name}: {field_name} must be a list of strings", USAGE)
    if spec.get("over", "all") not in ("all", "last"):
        raise HarnessError(f'{name}: over must be "all" or "last"', USAGE)
