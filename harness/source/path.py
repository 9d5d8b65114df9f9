"""In-repo path sources (the embedded replica): a folder next to the pin, verified by the
sha256 of the pin's [files] and copied (without build outputs) into the scratch tree."""

from __future__ import annotations

from pathlib import Path

from harness import build as buildmod
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.source.verify import Verification, check_files, summarize
from harness.vocab import SourceKind, SourceStatus


def verify_path_source(pin: Pin, root: Path) -> Verification:
    v = Verification(SourceStatus.UNCHECKED, f"path {root}", files=check_files(pin, root))
    if not pin.files:
        v.unverified.append("files (the pin lists none)")
    return summarize(v)


class PathSource:
    kind = SourceKind.PATH

    def __init__(self, pin: Pin) -> None:
        self.pin = pin

    def verify(self, checkout: Path | None = None) -> tuple[Verification, Path]:
        """The pin's folder; `checkout` does not apply to an in-repo source."""
        root = self.pin.source_root
        assert root is not None
        if not root.is_dir():
            raise HarnessError(f"pin {self.pin.name}: source folder {root} is missing", USAGE)
        return verify_path_source(self.pin, root), root

    def export(self, root: Path, dest: Path, commit: str | None = None) -> list[str]:
        if commit is not None:
            raise HarnessError(f"pin {self.pin.name} is a path source: it has no commits", USAGE)
        buildmod.copy_source(root, dest, skip=frozenset(self.pin.build_outputs))
        return []

    def ref_applier(self, root: Path, base: str | None = None) -> None:
        return None  # a folder has no refs: a `ref:` variant step is refused by apply_steps
