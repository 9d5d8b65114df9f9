"""Defaults that are upstream knowledge, read from data (harness/data/defaults.toml): which
pin a command uses without --pin, and the baseline variant of a compare."""

from __future__ import annotations

import os
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


@cache
def _defaults() -> dict[str, Any]:
    text = resources.files("harness").joinpath("data/defaults.toml").read_text()
    return tomllib.loads(text)


def default_pin(checkout: Path | None) -> str:
    """The pin for a real checkout when one is configured (--checkout or HARNESS_CHECKOUT),
    else the embedded one."""
    pins = _defaults()["pin"]
    configured = checkout or os.environ.get("HARNESS_CHECKOUT")
    return str(pins["with_checkout"] if configured else pins["default"])


def compare_baseline() -> str:
    return str(_defaults()["compare"]["baseline"])
