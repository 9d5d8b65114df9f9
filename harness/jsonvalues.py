"""How report.json's values read back where the dataclasses alone do not say it
(`report.load` reads report.json with pydantic over the model's own type hints).

One rule holds for every number of the model: a typed field is finite (`limits.wall_s:
inf` is damage; the model's `__pydantic_config__` refuses it), while a number in a map or
list of measured values (a trainer's metrics, a tool's timings, a load average) is data,
kept as written: `loss inf` stays inf, and NaN, which report.json writes as null, reads back
as NaN. Such a number is typed `Measured`; to a type checker it is a plain float."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AllowInfNan, BeforeValidator


def _null_is_nan(value: Any) -> Any:
    # report.model.plain writes a NaN as null: JSON has no NaN
    return math.nan if value is None else value


Measured = Annotated[float, AllowInfNan(True), BeforeValidator(_null_is_nan)]
