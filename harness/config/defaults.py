"""Defaults that are upstream knowledge, read from data (harness/data/defaults.toml): which
pin a command uses without --pin, and the baseline variant of a compare."""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path

from harness.config.fields import Strict, Text
from harness.config.schema_errors import read_toml, validate


class DefaultPins(Strict):
    """[pin]: the pin without --pin; with a checkout (--checkout, HARNESS_CHECKOUT)."""

    default: Text
    with_checkout: Text


class CompareDefaults(Strict):
    """[compare]: the baseline variant of `harness compare` (expected to fail)."""

    baseline: Text


class DefaultsModel(Strict):
    """harness/data/defaults.toml."""

    pin: DefaultPins
    compare: CompareDefaults


@cache
def _defaults() -> DefaultsModel:
    with resources.as_file(resources.files("harness").joinpath("data/defaults.toml")) as path:
        return validate(DefaultsModel, read_toml(path), "defaults.toml")


def default_pin(checkout: Path | None) -> str:
    """The pin for a real checkout when one is configured (--checkout or HARNESS_CHECKOUT),
    else the embedded one."""
    pins = _defaults().pin
    configured = checkout or os.environ.get("HARNESS_CHECKOUT")
    return pins.with_checkout if configured else pins.default


def compare_baseline() -> str:
    return _defaults().compare.baseline
