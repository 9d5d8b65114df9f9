"""The contract of a detector, and the one registry of them.

A detector is a function registered with `@detector(name, needs=..., params=..., fields=...)`:
it declares the inputs it needs (the dispatcher skips it when one is absent, so no detector
checks for them itself), the class of the params a rule may give it (a dataclass, built and
checked from the rule's TOML by `harness.config.causes.bind_params`), and the fields its
matches carry (what a rule's templates may use). It returns typed `Match`es.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from harness.config.causes import NoParams
from harness.sampling.model import SampleSet
from harness.vocab import Need

P = TypeVar("P")


@dataclass(frozen=True)
class Inputs:
    """What a run left, as the detectors see it. A detector reads only what it declared in
    `needs`; an input it did not declare may be empty."""

    samples: SampleSet
    output_tail: Sequence[str] = ()


@dataclass(frozen=True)
class Match:
    """One finding: the fields its rule's templates use, and the evidence lines."""

    fields: dict[str, str]
    evidence: tuple[str, ...] = ()


def match(evidence: Sequence[str], **fields: object) -> Match:
    """A Match with every field as text."""
    return Match({k: str(v) for k, v in fields.items()}, tuple(evidence))


Find = Callable[[Inputs, P], list[Match]]


@dataclass(frozen=True)
class Detector(Generic[P]):
    name: str
    needs: tuple[Need, ...]
    params: type[P]
    find: Find[P]
    # the fields of its matches; `more_fields` adds those that depend on the params (the
    # named groups of a regex)
    fields: tuple[str, ...] = ()
    more_fields: Callable[[P], tuple[str, ...]] | None = field(default=None)

    def fields_with(self, params: P) -> frozenset[str]:
        more = self.more_fields(params) if self.more_fields is not None else ()
        return frozenset((*self.fields, *more))


DETECTORS: dict[str, Detector[Any]] = {}


def detector(
    name: str,
    *,
    needs: tuple[Need, ...] = (Need.SAMPLES,),
    params: type[P] = NoParams,  # type: ignore[assignment]
    fields: tuple[str, ...] = (),
    more_fields: Callable[[P], tuple[str, ...]] | None = None,
) -> Callable[[Find[P]], Find[P]]:
    """Register the decorated function as the detector `name`."""

    def register(find: Find[P]) -> Find[P]:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        DETECTORS[name] = Detector(name, needs, params, find, fields, more_fields)
        return find

    return register


def run(
    found: Detector[P], params: P, samples: SampleSet | None, output_tail: Sequence[str]
) -> list[Match]:
    """The detector over what a run left: nothing when an input it needs is absent."""
    if Need.SAMPLES in found.needs and samples is None:
        return []
    if Need.OUTPUT in found.needs and not output_tail:
        return []
    if samples is None:  # a detector that does not look at samples gets an empty set
        samples = SampleSet(snapshots=[], activity=[], stacks=[], tools={}, notes=[], duration_s=0)
    return found.find(Inputs(samples, output_tail), params)
