"""The benchmarks still run (a seconds-long smoke each): their figures are for people and
live in bench/ and the README, never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "script",
    [
        "bench_stacks.py",
        "bench_flood.py",
        "bench_time_to_verdict.py",
        "attach.py",
        "bench_bisect_posterior.py",
    ],
)
def test_bench_smoke(script: str, tmp_path: Path, cache_env: dict[str, str]) -> None:
    out = tmp_path / "figures.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--smoke", "--json", str(out)],
        cwd=ROOT,
        env={**os.environ, **cache_env},
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(out.read_text()), "the benchmark wrote no figures"
