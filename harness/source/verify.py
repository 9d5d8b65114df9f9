"""What was checked about a source before a result is trusted: the per-file sha256 checks
against the pin's [files], the overall status (verified | drift | unverified | unchecked)
and its human-readable forms. Shared by every source kind."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

# the module, not its names: harness.config.pin may come to import this module itself, and
# UNVERIFIED is only read when a check runs, long after both modules have loaded
from harness import contain
from harness.config import pin as pinmod
from harness.vocab import FileStatus, SourceStatus

if TYPE_CHECKING:
    from harness.config.pin import Pin


def sha256_file(path: Path, what: str = "") -> str:
    """The sha256 of a regular file (a FIFO, a device or a link put in its place is
    refused, not read: a link to /dev/zero would never end)."""
    digest = hashlib.sha256()
    with os.fdopen(contain.open_regular(path, what=what or str(path)), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_file(pin: Pin, root: Path, rel: str) -> Path:
    """The file a pin's [files] key names, confined to the source root: a key such as
    "/etc/shadow", "../../x" or a path through a symlink that leads out of the tree is
    refused (naming the pin file and the key) before anything reads or hashes it. The pin
    loader refuses such keys too; this holds for a Pin built in code as well."""
    return contain.confined(root, rel, what=f"{pin.file.name} [files]")


@dataclass
class FileCheck:
    path: str
    expected: str
    actual: str | None  # None when the file is missing
    status: FileStatus


@dataclass
class Verification:
    """What was checked about the source before trusting a result."""

    status: SourceStatus
    source: str
    commit_expected: str = ""
    commit_actual: str = ""
    dirty: list[str] = field(default_factory=list)
    files: list[FileCheck] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # pin fields not yet read from a checkout
    notes: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> list[FileCheck]:
        return [f for f in self.files if f.status in (FileStatus.DIFFERS, FileStatus.MISSING)]

    def describe(self) -> str:
        parts: list[str] = [self.status]
        if self.drifted:
            parts.append("drift in " + ", ".join(f.path for f in self.drifted))
        if self.dirty:
            parts.append(f"{len(self.dirty)} uncommitted change(s)")
        if (
            self.commit_expected
            and self.commit_actual
            and self.commit_actual != self.commit_expected
        ):
            parts.append(f"HEAD {self.commit_actual[:12]} ≠ pinned {self.commit_expected[:12]}")
        if self.unverified:
            parts.append("unverified: " + ", ".join(self.unverified))
        return "; ".join(parts)


def check_files(pin: Pin, root: Path) -> list[FileCheck]:
    checks = []
    for rel, expected in sorted(pin.files.items()):
        path = pinned_file(pin, root, rel)
        actual = sha256_file(path, f"{pin.file.name} [files]") if path.is_file() else None
        if expected.startswith(pinmod.UNVERIFIED):
            status = FileStatus.UNVERIFIED
        elif actual is None:
            status = FileStatus.MISSING
        else:
            status = FileStatus.MATCH if actual == expected else FileStatus.DIFFERS
        checks.append(FileCheck(rel, expected, actual, status))
    return checks


def summarize(v: Verification) -> Verification:
    """Set the overall status from the parts: any drift wins, then anything unverified."""
    if (
        v.drifted
        or v.dirty
        or (
            v.commit_expected
            and v.commit_actual
            and v.commit_actual != v.commit_expected
            and not v.commit_expected.startswith(pinmod.UNVERIFIED)
        )
    ):
        v.status = SourceStatus.DRIFT
    elif v.unverified or any(f.status is FileStatus.UNVERIFIED for f in v.files):
        v.status = SourceStatus.UNVERIFIED
    else:
        v.status = SourceStatus.VERIFIED
    return v


def describe_verification(pin: Pin, v: Verification) -> str:
    lines = [f"pin {pin.name}: {v.status.upper()} ({v.source})"]
    if v.commit_expected or v.commit_actual:
        lines.append(f"  commit: pinned {v.commit_expected or '-'}, found {v.commit_actual or '-'}")
    for f in v.files:
        if f.status == FileStatus.MATCH:
            lines.append(f"  ok        {f.path}")
        elif f.status == FileStatus.UNVERIFIED:
            lines.append(
                f"  UNVERIFIED {f.path} (no hash pinned yet; found {f.actual or 'missing'})"
            )
        else:
            lines.append(
                f"  DRIFT     {f.path}: pinned {f.expected}, found {f.actual or 'missing'}"
            )
    lines += [f"  dirty     {d}" for d in v.dirty]
    lines += [f"  unverified: {u}" for u in v.unverified]
    lines += [f"  note: {n}" for n in v.notes]
    return "\n".join(lines)
