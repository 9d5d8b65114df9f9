"""KEY=VALUE options (`--env`, `--set`): parsing command-line text is the CLI's job."""

from __future__ import annotations

from collections.abc import Sequence

from harness.errors import HarnessError


def split_assignments(items: Sequence[str], what: str) -> dict[str, str]:
    """Parse repeated KEY=VALUE options; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HarnessError(f"{what} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out
