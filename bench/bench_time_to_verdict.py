"""Time to verdict on the stock replica's real hang, side by side with what a CI job would
otherwise use around the same command:

- `harness run breakout` (quiescence on, its default)
- `timeout T ./puffer train …` (coreutils): ends at T, says nothing about where
- pytest-timeout: a test that runs the command, `--timeout T`: ends at T with the test
  process's Python stack (not the trainer's)

Prints launch → verdict for each, the ratio to the harness, and what each one tells.

    .venv/bin/python bench/bench_time_to_verdict.py [--baseline-timeout 60] [--repeat 3]
    .venv/bin/python bench/bench_time_to_verdict.py --smoke        # CI: seconds, 1 round
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.pin import load_pin  # noqa: E402
from harness.config.scenario import load_scenario  # noqa: E402
from harness.pipeline.stages import verify_prepare_build  # noqa: E402

PYTEST_WRAPPER = """
import subprocess
def test_trainer():
    subprocess.run({argv!r}, cwd={cwd!r}, check=True)
"""


def harness_round(tmp: Path, i: int) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "harness", "run", "breakout", "--timeout", "120"]
    cmd += ["--report-dir", str(tmp / f"h{i}"), "--json", "--quiet"]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, timeout=300, check=False)
    wall = time.monotonic() - start
    r = json.loads(out.stdout)
    v = r["verdict"]
    causes = [c["id"] for c in v.get("causes", [])]
    return wall, f"{v['kind']} ({v['mechanism']}) in {v['location']}; cause {', '.join(causes)}"


def timeout_round(argv: list[str], cwd: Path, limit: float) -> tuple[float, str]:
    start = time.monotonic()
    out = subprocess.run(
        ["timeout", "-s", "KILL", str(limit), *argv], cwd=cwd, capture_output=True, check=False
    )
    return time.monotonic() - start, f"exit {out.returncode}, no location"


def pytest_round(argv: list[str], cwd: Path, limit: float, tmp: Path) -> tuple[float, str]:
    test = tmp / "test_trainer_wrapper.py"
    test.write_text(PYTEST_WRAPPER.format(argv=argv, cwd=str(cwd)))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
    cmd += [f"--timeout={limit:g}", "--timeout-method=signal"]
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 120, check=False)
    wall = time.monotonic() - start
    stack = "the test's own Python stack" if "Timeout" in out.stdout else "no stack"
    # pytest-timeout kills the test process, not the trainer it started: clean that up
    subprocess.run(["pkill", "-KILL", "-f", str(cwd / "puffer")], check=False)
    return wall, f"exit {out.returncode}, {stack}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline-timeout", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="one round, 2 s baselines")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.baseline_timeout = 1, 2.0
    pin = load_pin("replica")
    settings = load_scenario("breakout").settings(pin.lineage)
    built = verify_prepare_build(pin, "breakout", "stock", None, False).result
    argv = ["./puffer", "train", "breakout", f"--train.total-timesteps={settings.steps}"]
    rows: dict[str, list[float]] = {"harness": [], "timeout": [], "pytest-timeout": []}
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for i in range(args.repeat):
            for name in rows:
                if name == "harness":
                    wall, note = harness_round(tmp, i)
                elif name == "timeout":
                    wall, note = timeout_round(argv, built.tree, args.baseline_timeout)
                else:
                    wall, note = pytest_round(argv, built.tree, args.baseline_timeout, tmp)
                rows[name].append(wall)
                notes[name] = note
    base = statistics.median(rows["harness"])
    print(f"stock replica hang, median of {args.repeat} (baselines at {args.baseline_timeout:g} s)")
    print(f"{'tool':<16}{'launch→verdict':>16}{'× harness':>11}  what it tells")
    for name, walls in rows.items():
        med = statistics.median(walls)
        print(f"{name:<16}{med:>15.2f}s{med / base:>10.1f}×  {notes[name]}")
    if args.json:
        args.json.write_text(
            json.dumps({k: {"walls": v, "note": notes[k]} for k, v in rows.items()}, indent=2)
        )


if __name__ == "__main__":
    main()
