"""`harness probe`: compile the reward probe against the (variant's) env header, run it and
check the rewards it saw against the scenario's bounds."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.analysis import probe as probemod
from harness.config.defaults import default_pin
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from harness.pipeline.stages import prepare_tree
from harness.source import verify_source


def probe_env(
    env: str,
    pin_name: str | None,
    variant: str,
    checkout: Path | None,
    steps: int,
    num_envs: int,
    seed: int,
) -> probemod.ProbeResult:
    """Compile the reward probe against the (variant's) env header and check its output."""
    scenario = load_scenario(env)
    pin = load_pin(pin_name or default_pin(checkout))
    settings = scenario.settings(pin.lineage)
    probemod.probe_spec(pin)  # a pin without a probe driver fails before any checkout work
    _verification, root = verify_source(pin, checkout)
    tree, _applied = prepare_tree(pin, root, variant)
    try:
        out = tree / ".probe"
        out.mkdir()
        binary = probemod.compile_driver(pin, tree, settings.upstream_env, out)
        data = probemod.run_driver(binary, num_envs, steps, seed)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    bounds = scenario.raw.get("probe", {})
    return probemod.ProbeResult(env, data, probemod.evaluate(data, bounds))
