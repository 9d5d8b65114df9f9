"""`--expect hazard:KIND[:LOCATION]`: a hazard made the failure a run looks for (bisect,
compare, sweep, repeat, triage). KIND is a HazardKind word; LOCATION, when given, must be one
of the hazard's `locations`: a function (`env_start`), a `file:line` (`vecenv.h:177`) or a
file (`vecenv.h`) of the place it is reported at, of the child's entry into the runtime (a
fork), or of either order's call sites and lock names (a lock-order cycle)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.hazards.model import Hazard
from harness.outcome import USAGE
from harness.vocab import HazardKind, values

PREFIX = "hazard:"


@dataclass(frozen=True)
class HazardExpect:
    kind: HazardKind
    location: str | None = None

    def matches(self, hazard: Hazard) -> bool:
        if hazard.kind is not self.kind:
            return False
        return self.location is None or self.location in hazard.locations

    def spec(self) -> str:
        return f"{PREFIX}{self.kind.value}" + (f":{self.location}" if self.location else "")

    def describe(self) -> str:
        return self.kind.value + (f" at {self.location}" if self.location else "")


def is_hazard_spec(text: str) -> bool:
    return text.startswith(PREFIX)


def parse_expect(text: str) -> HazardExpect:
    """`hazard:KIND[:LOCATION]`, or a one-line usage error naming the kinds."""
    if not is_hazard_spec(text):
        raise HarnessError(f"{text!r}: a hazard is hazard:KIND[:LOCATION]", USAGE)
    kind, _, location = text[len(PREFIX) :].partition(":")
    try:
        parsed = HazardKind(kind)
    except ValueError:
        known = ", ".join(values(HazardKind))
        raise HarnessError(
            f"{text!r}: unknown hazard kind {kind!r} (known: {known})", USAGE
        ) from None
    if (location == "" and text.endswith(":")) or any(c.isspace() for c in location):
        raise HarnessError(f"{text!r}: LOCATION is a function, FILE:LINE or FILE", USAGE)
    return HazardExpect(parsed, location or None)
