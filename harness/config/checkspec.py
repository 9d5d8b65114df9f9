"""The shape of a scenario's [[checks]] entries, validated when the scenario loads: a bad
scenario must fail in a second, not after a ten-minute run. harness.analysis.checks
evaluates them, one checker per kind listed here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import Field, model_validator

from harness.config.fields import WORD, Number, Strict, StrList, fail
from harness.config.schema_errors import validate as validate_model
from harness.vocab import CheckKind, CheckOver

# what each kind needs besides `kind` (range: `key` or `keys`)
NEEDS: dict[CheckKind, tuple[str, ...]] = {
    CheckKind.REQUIRED: ("keys",),
    CheckKind.RANGE: (),
    CheckKind.FINITE: ("keys",),
    CheckKind.CONFIG: ("section", "key"),
    CheckKind.STEPS_REACHED: (),
}


class CheckModel(Strict):
    """One [[checks]] entry of a scenario (docs/scenario-schema.md, "Check kinds")."""

    kind: Annotated[CheckKind, WORD]
    name: str = ""
    key: Annotated[str, Field(min_length=1)] | None = None
    keys: StrList | None = None
    min: Number | None = None
    max: Number | None = None
    over: Annotated[CheckOver, WORD] = CheckOver.ALL
    optional: bool = False
    pins: StrList | None = None
    section: Annotated[str, Field(min_length=1)] | None = None
    fraction: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    per_epoch: StrList | None = None

    @model_validator(mode="after")
    def _complete(self) -> CheckModel:
        missing = [f for f in NEEDS[self.kind] if getattr(self, f) is None]
        if self.kind == CheckKind.RANGE and self.key is None and self.keys is None:
            missing.append("key")
        if missing:
            what = self.name or str(self.kind)
            raise fail(f"check {what!r} needs {', '.join(missing)}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise fail(f"min {self.min} is above max {self.max}")
        return self


class ChecksModel(Strict):
    checks: list[CheckModel] = Field(default_factory=list)


def validate(specs: Iterable[Mapping[str, Any]], where: str) -> None:
    """Reject unknown kinds and keys, missing fields and mistyped values before anything
    runs: a bad scenario must fail in a second, not after a ten-minute run."""
    validate_model(ChecksModel, {"checks": specs}, where)
