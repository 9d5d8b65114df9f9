"""Env reward probe: compile a small driver of ours against an env header alone, step N
envs with random actions, and check the raw per-step rewards, the post-clamp rewards the
trainer trains on, the terminal rate and the env's logged fields against the scenario.

Which driver fits which upstream's env API is data (the pin's [probe] table); the drivers
live in harness/data/probe/.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from harness import contain
from harness.analysis.checks import CheckResult
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.outcome import BUILD_FAILED, USAGE
from harness.process import tools
from harness.vocab import CheckStatus

COMPILE_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 300.0


@dataclass
class ProbeResult:
    env: str
    data: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != CheckStatus.FAIL for c in self.checks)


def probe_spec(pin: Pin) -> dict[str, Any]:
    spec = pin.raw.get("probe")
    if not isinstance(spec, dict) or "driver" not in spec:
        raise HarnessError(f"pin {pin.name} defines no [probe] driver for its env headers", USAGE)
    return spec


def compile_driver(pin: Pin, tree: Path, env: str, out: Path) -> Path:
    spec = probe_spec(pin)
    driver = resources.files("harness").joinpath(f"data/probe/{spec['driver']}.c")
    if not driver.is_file():
        raise HarnessError(f"pin {pin.name}: unknown probe driver {spec['driver']!r}", USAGE)
    header = str(spec.get("header", "ocean/{env}/{env}.h")).format(env=env)
    # the header and the include folders are confined to the tree: the probe compiles
    # against the source under test, never a file elsewhere on the host
    what = f"{pin.file.name} [probe]"
    header_path = contain.confined(tree, header, what=f"{what} header")
    if any(c in header for c in '"\\\n'):  # it is spliced into -DENV_HEADER="..."
        raise contain.refuse(f"{what} header", header, "a quote, backslash or newline in it")
    includes = [
        contain.confined(tree, str(inc), what=f"{what} include") for inc in spec.get("include", [])
    ]
    if not header_path.is_file():
        raise HarnessError(f"env header {header} not found in the source of pin {pin.name}", USAGE)
    source = out / "probe.c"
    source.write_text(driver.read_text())
    binary = out / "probe"
    argv = [shutil.which("gcc") or "gcc", "-O2", "-g", f'-DENV_HEADER="{header}"', f"-I{tree}"]
    argv += [f"-I{inc}" for inc in includes]
    argv += [str(source), "-o", str(binary), "-lm"]
    res = tools.run_tool(argv, timeout=COMPILE_TIMEOUT_S, cwd=out)
    if res.error:
        raise HarnessError(
            f"cannot run the C compiler for the reward probe: {res.error}", BUILD_FAILED
        )
    if res.returncode != 0:
        first = (res.stderr or res.stdout or "timed out").strip().splitlines()[0]
        raise HarnessError(
            f"the reward probe does not compile against {header}: {first}", BUILD_FAILED
        )
    return binary


def run_driver(binary: Path, num_envs: int, steps: int, seed: int) -> dict[str, Any]:
    res = tools.run_tool([str(binary), str(num_envs), str(steps), str(seed)], timeout=RUN_TIMEOUT_S)
    if res.returncode != 0:
        why = "timed out" if res.timed_out else f"exit {res.returncode}: {res.stderr.strip()}"
        raise HarnessError(f"the reward probe failed: {why}", BUILD_FAILED)
    try:
        data: dict[str, Any] = json.loads(res.stdout)
    except json.JSONDecodeError as exc:
        raise HarnessError(f"the reward probe printed no JSON: {exc}", BUILD_FAILED) from exc
    return data


def _range_check(name: str, value: float, lo: float | None, hi: float | None) -> CheckResult:
    bound = f"[{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"
    ok = (lo is None or value >= lo) and (hi is None or value <= hi)
    msg = "" if ok else f"{name} = {value:g} outside {bound}"
    return CheckResult(name, CheckStatus.PASS if ok else CheckStatus.FAIL, f"{value:g}", bound, msg)


def evaluate(data: dict[str, Any], bounds: dict[str, Any]) -> list[CheckResult]:
    """Checks of a probe's output against the scenario's [probe] bounds."""
    raw_lo, raw_hi = bounds.get("raw_min"), bounds.get("raw_max")
    out = [
        _range_check("probe raw reward min", data["raw_min"], raw_lo, raw_hi),
        _range_check("probe raw reward max", data["raw_max"], raw_lo, raw_hi),
        _range_check(
            "probe raw reward min within the env's declared range",
            data["raw_min"],
            data["declared_min"],
            data["declared_max"],
        ),
        _range_check(
            "probe raw reward max within the env's declared range",
            data["raw_max"],
            data["declared_min"],
            data["declared_max"],
        ),
        _range_check("probe clamped reward min", data["clamped_min"], -1.0, 1.0),
        _range_check("probe clamped reward max", data["clamped_max"], -1.0, 1.0),
        _range_check("probe non-finite rewards", data["nonfinite"], 0, 0),
    ]
    above = bounds.get("expect_raw_above")
    if above is not None:
        ok = data["raw_max"] > above
        out.append(
            CheckResult(
                f"probe raw reward exceeds {above:g} (the clamp matters)",
                CheckStatus.PASS if ok else CheckStatus.FAIL,
                f"{data['raw_max']:g}",
                f"> {above:g}",
                "" if ok else f"no raw reward above {above:g} in {data['samples']} steps",
            )
        )
    for key, (lo, hi) in bounds.get("log", {}).items():
        if key in data["log"]:
            out.append(_range_check(f"probe log {key}", data["log"][key], lo, hi))
        else:
            out.append(
                CheckResult(
                    f"probe log {key}",
                    CheckStatus.FAIL,
                    None,
                    f"[{lo}, {hi}]",
                    f"the env's Log has no field {key}",
                )
            )
    if data["episodes"] <= 0:
        out.append(
            CheckResult(
                "probe episodes finished",
                CheckStatus.FAIL,
                0,
                ">= 1",
                "no episode finished: increase --steps",
            )
        )
    return out
