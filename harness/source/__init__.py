"""The pinned upstream's source, of one of three kinds, behind one protocol.

A pin's [source] (harness.config.pin, docs/pin-schema.md) names where the upstream comes
from: `path` (a folder in this repository, e.g. the embedded replica), `git` (the user's
checkout, or a harness-managed clone, at a pinned commit) or `pypi` (an sdist pinned by
its sha256). `source_for(pin)` is the one place that dispatches on the kind; the rest of
the harness verifies a source, exports it into a scratch tree and applies `ref:` variant
steps through the returned `Source`, never through the kind.

Modules: `verify` (what was checked: Verification, the per-file sha256 checks), `path`,
`git` (verify, export, mirror, fix refs, clone/fetch, `harness pin update`), `gitrepo`
(repository reads through GitPython, each with a hard timeout) and `pypi` (sdist
download, hash check, unpack). git and pypi are imported only when a pin needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.vocab import SourceKind

if TYPE_CHECKING:
    from harness.config.pin import Pin
    from harness.source.verify import Verification

# apply(tree, ref) -> the changes it made: a `ref:` variant step (harness.variants.RefApplier)
RefApplier = Callable[[Path, str], list[str]]


class Source(Protocol):
    """One pin's source. `root` is what verify returned: the folder (path, git) or the
    downloaded sdist (pypi), as export and ref_applier expect it."""

    kind: SourceKind
    pin: Pin

    def verify(self, checkout: Path | None = None) -> tuple[Verification, Path]:
        """Check the source against the pin; `checkout` (git only) overrides where the
        checkout is looked for (else HARNESS_CHECKOUT, else the managed clone)."""
        ...

    def export(self, root: Path, dest: Path, commit: str | None = None) -> list[str]:
        """Write the source's files into `dest` (an empty scratch folder): git's working
        tree, or the tree of `commit` (git only). Returns the changes made on the way
        (pypi's [prepare] steps)."""
        ...

    def ref_applier(self, root: Path, base: str | None = None) -> RefApplier | None:
        """What applies a `ref:` variant step onto an exported tree (diffs taken against
        `base`, default HEAD), or None where the kind has no refs."""
        ...


def source_for(pin: Pin) -> Source:
    """The one dispatch on pin.source.kind (already validated by the pin parser)."""
    kind = pin.source.kind
    if kind == SourceKind.PATH:
        from harness.source.path import PathSource

        return PathSource(pin)
    if kind == SourceKind.GIT:
        from harness.source.git import GitSource  # imports GitPython

        return GitSource(pin)
    if kind == SourceKind.PYPI:
        from harness.source.pypi import PypiSource  # downloads

        return PypiSource(pin)
    from harness.errors import HarnessError
    from harness.outcome import USAGE

    raise HarnessError(f"pin {pin.name}: unknown source kind {kind!r}", USAGE)


def verify_source(pin: Pin, checkout: Path | None = None) -> tuple[Verification, Path]:
    """Verify the pinned source and return it with what to export from."""
    return source_for(pin).verify(checkout)
