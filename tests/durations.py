"""How long each test took in a full run, for the scheduler in conftest.py (longest first).

    python -m pytest --junitxml=run.xml        # a full run, on the CI machine or alike
    python -m tests.durations run.xml          # rewrites tests/durations.json

The figures only order the work: a test missing from the file (new, renamed) is estimated
from its markers, so a stale file costs balance, never correctness."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from junitparser import JUnitXml

FILE = Path(__file__).resolve().parent / "durations.json"


def nodeid(classname: str, name: str) -> str:
    # "tests.test_x" + "test_y[p]" -> "tests/test_x.py::test_y[p]"; xdist's loadgroup ends a
    # grouped test's id with "@GROUP" (after any "[params]"): the file keys it without
    at = name.rfind("@")
    if at > name.rfind("]"):
        name = name[:at]
    # "tests.test_x.TestK" is class TestK of tests/test_x.py: the module is the last part
    # named test_*, the parts after it are classes
    parts = classname.split(".")
    mod = max(i for i, part in enumerate(parts) if part.startswith("test_") or i == 0)
    return "::".join(["/".join(parts[: mod + 1]) + ".py", *parts[mod + 1 :], name])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.durations JUNIT.xml", file=sys.stderr)
        return 2
    seen: dict[str, float] = {}
    for suite in JUnitXml.fromfile(argv[0]):
        for case in suite:
            seen[nodeid(case.classname, case.name)] = round(float(case.time), 1)
    FILE.write_text(json.dumps(dict(sorted(seen.items())), indent=0) + "\n")
    print(f"{len(seen)} tests, {sum(seen.values()):.0f} s in all: {FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
