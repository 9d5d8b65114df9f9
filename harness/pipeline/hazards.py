"""`--hazards` in a run (docs/hazards.md): the recorders loaded into the run's environment
before the launch, their records read back into report.json `hazards` after it, whatever the
verdict; and `--expect hazard:KIND[:LOCATION]`, which makes a passing run that shows that
hazard a failure of its own (verdict `hazard`), for bisect, compare, sweep and repeat."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import HarnessError
from harness.files import write_failure
from harness.hazards.expect import HazardExpect
from harness.hazards.findings import find_hazards
from harness.hazards.model import HazardReport
from harness.hazards.shim import hazard_env, recorders
from harness.outcome import Kind
from harness.report.model import Report

HAZARDS_DIR = "hazards"  # the records, in the report folder


def prepare(report: Report, env: dict[str, str], argv: list[str], cwd: Path) -> None:
    """Build (cached) the recorders and add what loads them to `env`; a command the shim
    cannot enter (static, set-user-ID) is said in a note."""
    folder = report.artifact(HAZARDS_DIR)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarnessError(f"cannot create {folder}: {write_failure(exc)}") from None
    env.update(hazard_env(recorders(), folder, env))
    why = not_covered(argv[0], cwd, env.get("PATH", "")) if argv else None
    if why:
        report.notes.append(f"--hazards: {argv[0]} is {why}: the shim does not load into it")


def not_covered(command: str, cwd: Path, path: str) -> str | None:
    """Why LD_PRELOAD cannot reach this command ("a static executable", "set-user-ID"),
    None when it can or the file cannot be read (a script: its interpreter is what runs)."""
    found = command if "/" in command else _which(command, path)
    if found is None:
        return None
    target = Path(cwd, found) if not os.path.isabs(found) else Path(found)
    try:
        mode = target.stat().st_mode
        with target.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if mode & (stat.S_ISUID | stat.S_ISGID):
        return "set-user-ID or set-group-ID (the loader ignores LD_PRELOAD there)"
    if head[:4] != b"\x7fELF":
        return None
    try:
        from elftools.elf.elffile import ELFFile

        with target.open("rb") as fh:
            elf = ELFFile(fh)
            if not any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments()):
                return "a static executable (no dynamic loader)"
    except Exception:  # pyelftools on a damaged file: nothing to say
        return None
    return None


def _which(command: str, path: str) -> str | None:
    import shutil

    return shutil.which(command, path=path or None)


def collect(report: Report, expect: HazardExpect | None) -> HazardReport:
    """The run's hazards into the report (always: a hang's are as telling as a pass's)."""
    found = find_hazards(report.artifact(HAZARDS_DIR), expect)
    report.hazards = found
    return found


def judge(report: Report, expect: HazardExpect | None) -> None:
    """A passing run that showed the expected hazard fails as `hazard`: summary, location and
    evidence from the hazard (compare, sweep and bisect count it as the failure sought); a run
    that failed otherwise keeps its kind, and a note says the hazard was seen too."""
    verdict, found = report.verdict, report.hazards
    if expect is None or verdict is None or found is None or not found.expected:
        return
    first = found.expected[0]
    if verdict.kind is not Kind.PASS:
        report.notes.append(f"the expected hazard was seen too: {first.summary}")
        return
    verdict.become(Kind.HAZARD)
    verdict.summary = f"hazard {first.kind.value} (expected): {first.summary}"
    verdict.location = first.location or None
    verdict.location_frames = [s.label() for s in (first.sites or first.stack)[:4]]
    verdict.evidence = [first.summary, first.consequence, *first.cycle, *verdict.evidence]
