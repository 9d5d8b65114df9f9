"""The PufferLib 5.0 pin on a machine without a GPU: its templates, its unverified fields,
its parser on sample output written from the documented format, and a build that fails
fast with a hint (issue 6)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from harness import dashboard
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from tests.harness_cli import harness

DATA = Path(__file__).resolve().parent / "data"


def test_templates_render_to_the_documented_commands() -> None:
    pin = load_pin("pufferlib-5.0")
    assert pin.render_build("breakout") == "bash build.sh breakout"
    settings = load_scenario("breakout").settings(pin.lineage)
    argv = shlex.split(pin.render_run("breakout", 50000)) + list(settings.args)
    assert argv == [
        "./puffer",
        "train",
        "breakout",
        "--train.total-timesteps=50000",
        "--base.eval-episodes=0",
    ]
    assert all("=" in a for a in argv if a.startswith("--"))  # the space form is rejected
    assert pin.source.branch == "5.0" and pin.source.commit == "UNVERIFIED:23c84bdb"
    assert pin.variants["fixed"] == "ref:pull/668/head"
    assert [s.name for s in pin.signatures] == ["env_start", "vec_thread_main"]


def test_show_names_what_is_unverified() -> None:
    res = harness("pin", "show", "--pin", "pufferlib-5.0", report_root=Path("."))
    assert res.code == 0
    assert "UNVERIFIED: commit UNVERIFIED:23c84bdb" in res.stdout
    assert "src/pufferl.cu  UNVERIFIED" in res.stdout


def test_parser_reads_the_documented_5_0_box() -> None:
    frames = dashboard.parse_text("puffer5", (DATA / "puffer5_sample.txt").read_text())
    complete = [f for f in frames if f.complete]
    assert complete, "no frame parsed"
    last = complete[-1].metrics
    for key in ("SPS", "agent_steps", "uptime", "epoch", "util/gpu_percent", "loss/clipfrac"):
        assert key in last, key


def _fake_checkout(root: Path) -> Path:
    """A git repo shaped like a 5.0 checkout, with a build script of ours that compiles and
    links the way the upstream one does (nvcc, -arch=native, NCCL/cuBLAS/NVML)."""
    (root / "src").mkdir(parents=True)
    (root / "config").mkdir()
    (root / "src" / "pufferl.cu").write_text("__global__ void k() {}\nint main() { return 0; }\n")
    (root / "build.sh").write_text(
        "set -e\n"
        'nvcc -arch="${NVCC_ARCH:-native}" -Xcompiler=-fopenmp src/pufferl.cu -o puffer '
        "-lcudart -lnccl -lnvidia-ml -lcublas\n"
    )
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(cmd, cwd=root, check=True, timeout=60)
    return root


@pytest.mark.timeout(300)
def test_build_fails_fast_with_a_hint(tmp_path: Path) -> None:
    checkout = _fake_checkout(tmp_path / "PufferLib")
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    res = harness(
        "run", "breakout", "--checkout", str(checkout), report_root=tmp_path / "r", env=env
    )
    assert res.code == 5 and "does not match the pin" in res.stderr  # HEAD is not 23c84bdb
    res = harness(
        "run",
        "breakout",
        "--checkout",
        str(checkout),
        "--allow-drift",
        report_root=tmp_path / "r2",
        env=env,
    )
    assert res.code == 4, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    text = res.stdout + res.stderr
    assert any(h in text for h in ("NCCL is missing", "ccache", "nvcc", "NVML", "cuBLAS")), text
