"""cases.toml read into typed cases: what each corpus program is and what the harness must
say about it. Shared by tests/test_realworld.py and bench/realworld.py."""

from __future__ import annotations

import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_FILE = HERE / "cases.toml"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Expect:
    verdict: str
    mechanism: str
    trigger: str
    early: bool
    location: str  # a regex searched in verdict.location
    cause: str
    pending: str  # "" once the harness delivers all of it
    # a regex searched in the located frame (verdict.location_frames[0]), when the location
    # alone cannot tell the processes apart (a parent's and a child's `<module>`)
    frame: str = ""
    # a regex searched in verdict.wake_chain (where the chain ends, what a poll polls)
    chain: str = ""


@dataclass(frozen=True)
class Case:
    id: str
    file: str
    argv: tuple[str, ...]
    kind: str  # "hang" | "healthy"
    source: str
    tools: tuple[str, ...]
    modules: tuple[str, ...]
    expect: Expect | None  # None for a healthy look-alike

    @property
    def hang(self) -> bool:
        return self.kind == "hang"

    def command(self) -> list[str]:
        """The argv to run from this folder: "python" is this interpreter (the venv's),
        "mpiexec" the launcher beside it (the mpich wheel's), else found on PATH."""
        out = []
        for word in self.argv:
            if word == "python":
                out.append(sys.executable)
            elif word == "mpiexec":
                beside = VENV_BIN / "mpiexec"
                out.append(str(beside) if beside.exists() else shutil.which(word) or word)
            else:
                out.append(word)
        return out


def _expect(raw: dict[str, object]) -> Expect:
    return Expect(
        verdict=str(raw["verdict"]),
        mechanism=str(raw["mechanism"]),
        trigger=str(raw["trigger"]),
        early=bool(raw["early"]),
        location=str(raw["location"]),
        cause=str(raw["cause"]),
        pending=str(raw.get("pending", "")),
        frame=str(raw.get("frame", "")),
        chain=str(raw.get("chain", "")),
    )


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    data = tomllib.loads(path.read_text())
    cases = []
    for raw in data["cases"]:
        expect = raw.get("expect")
        kind = str(raw["kind"])
        if kind not in ("hang", "healthy") or (kind == "hang") != (expect is not None):
            raise ValueError(f"{path}: case {raw.get('id')}: a hang has [cases.expect], only")
        cases.append(
            Case(
                id=str(raw["id"]),
                file=str(raw["file"]),
                argv=tuple(str(a) for a in raw["argv"]),
                kind=kind,
                source=str(raw["source"]),
                tools=tuple(str(t) for t in raw.get("tools", [])),
                modules=tuple(str(m) for m in raw.get("modules", [])),
                expect=_expect(expect) if expect is not None else None,
            )
        )
    return cases
