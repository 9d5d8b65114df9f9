"""Under GitHub Actions (simulated: GITHUB_ACTIONS=true and a temporary step-summary file)
a real hang of the stock replica lands in the step summary and as an `::error` annotation
at its source line; and action.yml's own steps, extracted and run as a script, do the same
and fail with the verdict's exit code."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.report import github
from tests.harness_cli import ROOT, harness

ANNOTATION = re.compile(r"^::error file=([^,]+),line=(\d+),title=([^:]*)::(.*)$", re.M)


def gh_env(tmp_path: Path, cache_env: dict[str, str]) -> dict[str, str]:
    summary = tmp_path / "step-summary.md"
    summary.write_text("# earlier steps\n")
    return {
        **cache_env,
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(ROOT),
        "GITHUB_JOB": "test",
    }


def test_workflow_command_escaping() -> None:
    line = github.command("error", "50% done\nnext", file="a,b:c.h", line=3, title="t")
    assert line == "::error file=a%2Cb%3Ac.h,line=3,title=t::50%25 done%0Anext"


def test_nothing_is_written_outside_actions(tmp_path: Path) -> None:
    summary = tmp_path / "s.md"
    assert not github.active({"GITHUB_STEP_SUMMARY": str(summary)})
    assert not summary.exists()


def _check_hang_outputs(stdout: str, summary: Path) -> None:
    text = summary.read_text()
    assert text.startswith("# earlier steps\n"), "the summary is appended to, never replaced"
    assert "harness run: breakout → **hang**" in text
    assert "| location | env_start |" in text
    found = ANNOTATION.findall(stdout)
    assert len(found) == 1, stdout
    path, line, title, message = found[0]
    assert path == "upstream_pin/replica/src/vecenv.h", path
    source = (ROOT / path).read_text().splitlines()
    # the annotated line is inside env_start in the real source of the workspace
    head = "\n".join(source[: int(line)])
    assert head.rfind("env_start(") > head.rfind("\n}\n"), f"line {line} is not in env_start"
    assert title == "harness run breakout%3A hang" and "env_start" in message  # ":" escaped


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_hang_under_actions_writes_summary_and_annotation(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    env = gh_env(tmp_path, cache_env)
    res = harness("run", "breakout", "--timeout", "60", report_root=tmp_path / "r", env=env)
    assert res.code == 2, res.stderr
    _check_hang_outputs(res.stdout, Path(env["GITHUB_STEP_SUMMARY"]))


def _action_script(inputs: dict[str, str]) -> str:
    """action.yml's `run` steps as one bash script: `${{ inputs.x }}` in each step's env
    replaced by the test's inputs, `${{ steps.harness.outputs.x }}` read back from
    GITHUB_OUTPUT; `uses:` steps (the artifact upload) are left out."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    defaults = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
    values = {**defaults, **inputs}
    parts = ["set -euo pipefail"]
    for step in action["runs"]["steps"]:
        if "run" not in step:
            continue
        exports = []
        for key, expr in (step.get("env") or {}).items():
            m = re.fullmatch(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", str(expr))
            n = re.fullmatch(r"\$\{\{\s*steps\.harness\.outputs\.([\w-]+)\s*\}\}", str(expr))
            if m:
                exports.append(f"export {key}={_quote(values[m[1]])}")
            elif n:
                exports.append(
                    f'export {key}="$(sed -n "s/^{n[1]}=//p" "$GITHUB_OUTPUT" | tail -n 1)"'
                )
            else:
                raise AssertionError(f"unexpected expression in action.yml: {expr}")
        parts.append("(\n" + "\n".join(exports) + "\n" + step["run"] + "\n)")
    return "\n".join(parts) + "\n"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_action_steps_run_as_a_script(tmp_path: Path, cache_env: dict[str, str]) -> None:
    env = {
        **os.environ,
        **gh_env(tmp_path, cache_env),
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
    }
    script = _action_script(
        {"env": "breakout", "timeout": "60", "report-dir": str(tmp_path / "reports")}
    )
    res = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert res.returncode == 2, res.stdout + res.stderr  # the job fails with the verdict's code
    outputs = (tmp_path / "output.txt").read_text()
    assert "exit-code=2" in outputs
    report = re.search(r"^report=(.*)$", outputs, re.M)
    assert report and (Path(report[1]) / "report.json").is_file()
    artifact = re.search(r"^artifact=(.*)$", outputs, re.M)
    assert artifact and re.fullmatch(r"[A-Za-z0-9._-]+", artifact[1])
    _check_hang_outputs(res.stdout, Path(env["GITHUB_STEP_SUMMARY"]))
