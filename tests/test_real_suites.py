"""A real third-party suite with and without `pytest --hang-watch` (bench/real_suites.py
--smoke: pebble 5.2.3's fork and thread files from its PyPI sdist, 73 tests, in this venv;
fetched once into the suites' cache, offline after): the outcome of every test must be the
same in each mode, alone and on two xdist workers, and the plugin must say nothing (no
verdict, no warning) of a suite that does not hang. The wall time is measured, never
asserted here (bench/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.facts import missing

ROOT = Path(__file__).resolve().parent.parent
FETCH_FAILED = 3  # bench/real_suites.py: the sdist could not be had


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_suite_has_the_same_outcomes_with_hang_watch(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "real_suites.py"), "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    if res.returncode == FETCH_FAILED:
        missing(f"pebble 5.2.3's sdist from PyPI ({res.stderr.strip()[-300:]})", "a real suite")
    assert res.returncode == 0, res.stdout + res.stderr
    runs = {r["mode"]: r for r in json.loads(out.read_text())}
    assert set(runs) == {"plain", "watch", "plain -n 2", "watch -n 2"}, runs.keys()
    plain = runs["plain"]
    assert plain["counts"].get("passed", 0) >= 70 and len(plain["outcomes"]) >= 70, plain
    for mode, r in runs.items():
        assert r["outcomes"] == plain["outcomes"], (mode, res.stdout)
        assert r["counts"] == plain["counts"], (mode, r["counts"], plain["counts"])
        assert r["reports"] == 0 and r["said"] == [], (mode, r["said"], res.stdout)
    for mode in ("watch", "watch -n 2"):
        # the watcher really ran: it costs some CPU (one per xdist worker)
        assert runs[mode]["watcher_cpu_s"] > 0, (mode, res.stdout)
