"""PufferLib 3.0.0, a real trainer we did not write, under the harness on CPU (issue 6):
what its tests share. The first build of it goes from the PyPI sdist into the harness cache
(~2-3 min); later runs reuse that build (the cache is the user's, so CI on the same machine
reuses it too). Its three tests are three modules, so that the test workers run them side by
side (a module stays on one worker); the build cache's lock makes a second worker wait for
the first one's build and reuse it."""

from __future__ import annotations

import pytest

from tests.harness_cli import harness

MARKS = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(1800)]
PIN = ("--pin", "pufferlib-3.0.0")
# the stall window of the hang tests: longer than the longest gap between two dashboard
# frames of a healthy run while the other test workers load the cores (a training step in
# LSTM.forward was seen to take over 20 s then)
STALL = "40"


def build(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Build PufferLib 3.0.0 for puffer_breakout (a cache hit after the first time)."""
    res = harness(
        "build", "puffer_breakout", *PIN, report_root=tmp_path_factory.mktemp("b"), timeout=1700
    )
    assert res.code == 0, res.stdout + res.stderr
