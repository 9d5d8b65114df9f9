"""The parsers by name, and what callers do with a stream of frames: parse a whole output,
merge the latest metrics, measure throughput."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from harness.dashboard.box import Puffer3Parser, Puffer5Parser
from harness.dashboard.lines import LinesParser
from harness.dashboard.text import MAX_LINE_CHARS, MetricsFrame


class Parser(Protocol):
    name: str

    def feed(self, line: str) -> list[MetricsFrame]: ...

    def finish(self) -> list[MetricsFrame]: ...


PARSERS: dict[str, Callable[[], Parser]] = {
    "puffer5": Puffer5Parser,
    "puffer3": Puffer3Parser,
    "lines": LinesParser,
}


def get_parser(name: str) -> Parser:
    factory = PARSERS.get(name)
    if factory is None:
        known = ", ".join(sorted(PARSERS))
        raise ValueError(f"unknown dashboard parser {name!r} (known: {known})")
    return factory()


def _lines(text: str) -> Iterator[str]:
    """Lines of text without copying more than MAX_LINE_CHARS of any one of them."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        end = n if end < 0 else end
        yield text[start : min(end, start + MAX_LINE_CHARS)]
        start = end + 1


def parse_text(name: str, text: str) -> list[MetricsFrame]:
    """All frames of a whole output (an unterminated last line is fed too), then finish()."""
    parser = get_parser(name)
    frames: list[MetricsFrame] = []
    for line in _lines(text):
        frames.extend(parser.feed(line))
    frames.extend(parser.finish())
    return frames


def latest(frames: Iterable[MetricsFrame]) -> dict[str, float]:
    """Metrics of the complete frames merged in order, so the last frame wins and keys only
    earlier frames showed (losses before the first update, say) are kept."""
    merged: dict[str, float] = {}
    for frame in frames:
        if frame.complete:
            merged.update(frame.metrics)
    return merged


def measured_sps(frames: Iterable[MetricsFrame]) -> float | None:
    """Training throughput: the median of the SPS shown on each new epoch's frame. Frames
    that repeat an epoch are left out (the replica reprints its last frame at exit; 3.0
    prints one after its final evaluation rollouts, with a misleading rate). The median of
    per-epoch rates is precise to the 3 digits shown, unlike steps/uptime whose uptime is
    shown in whole seconds."""
    rates: list[float] = []
    last_epoch = 0.0
    for frame in frames:
        epoch, sps = frame.metrics.get("epoch"), frame.metrics.get("SPS")
        if not frame.complete or epoch is None or sps is None or epoch <= last_epoch:
            continue
        last_epoch = epoch
        rates.append(sps)
    if not rates:
        return None
    rates.sort()
    mid = len(rates) // 2
    return rates[mid] if len(rates) % 2 else (rates[mid - 1] + rates[mid]) / 2
