"""The PufferLib 5.0 pin without a real 5.0 checkout: its templates, its unverified fields,
its parser on sample output written from the documented format, and a fake 5.0-shaped build
that fails fast with a hint where this host's CUDA stack cannot build it (issue 6)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import dashboard
from harness.build import GENERIC_HINTS
from harness.config.pin import load_pin
from harness.config.scenario import load_scenario
from harness.outcome import Kind
from tests import facts
from tests.harness_cli import harness, verdict_of

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


def _build_directly(checkout: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The platform's own answer: the fake checkout's build.sh run by hand, no harness."""
    copy = tmp_path / "direct"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    return subprocess.run(
        ["bash", "build.sh", "breakout"],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_missing_build_tools_fail_before_building(tmp_path: Path) -> None:
    """No CUDA toolchain on PATH (only bash and git): one line naming the pin's build tools,
    exit 4, before any build is started. Hermetic: the same on every host."""
    checkout = _fake_checkout(tmp_path / "PufferLib")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "sh", "git"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bare / tool).symlink_to(found)
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache"), "PATH": str(bare)}
    res = harness(
        "run",
        "breakout",
        "--checkout",
        str(checkout),
        "--allow-drift",
        report_root=tmp_path / "r",
        env=env,
    )
    assert res.code == 4, res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "harness: error: build of pufferlib-5.0 needs nvcc, ccache, gcc on PATH (install them; "
        "./setup.sh installs gcc, gdb, elfutils, git and ccache)"
    ]
    builds = tmp_path / "cache" / "builds"
    assert [p.name for p in builds.iterdir() if p.suffix != ".lock"] == []  # no build, no log


@pytest.mark.timeout(300)
def test_build_fails_fast_with_a_hint(tmp_path: Path) -> None:
    """With this host's CUDA toolchain: a build that fails (no GPU for -arch=native on older
    nvcc, or NCCL/NVML/cuBLAS missing) ends with exit 4, its first error line and the pin's
    hint for that error. Whether it fails is what building it by hand says."""
    if shutil.which("nvcc") is None:  # the CUDA toolkit: a GPU host's, not setup.sh's
        pytest.skip("no nvcc here: the missing-tools test covers this host")
    for tool in ("ccache", "gcc"):  # setup.sh's: skips here, fails under CI
        facts.require_tool(tool, why="the 5.0 build.sh compiles through ccache and gcc")
    checkout = _fake_checkout(tmp_path / "PufferLib")
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    res = harness(
        "run", "breakout", "--checkout", str(checkout), report_root=tmp_path / "r", env=env
    )
    assert res.code == 5 and "does not match the pin" in res.stderr  # HEAD is not 23c84bdb
    direct = _build_directly(checkout, tmp_path)
    res = harness(
        "run",
        "breakout",
        "--checkout",
        str(checkout),
        "--allow-drift",
        report_root=tmp_path / "r2",
        env=env,
    )
    assert "Traceback" not in res.stdout + res.stderr
    report = res.loaded
    build = report.build
    assert build is not None, res.stdout + res.stderr
    if direct.returncode == 0:
        # a host with a GPU (or a recent nvcc) and every library: the build succeeds here too
        assert build.ok and verdict_of(report).kind is not Kind.BUILD_FAILED, build
        return
    log = direct.stdout + direct.stderr
    assert res.code == 4, res.stdout + res.stderr
    assert verdict_of(report).kind is Kind.BUILD_FAILED
    assert not build.ok and build.first_error, build
    assert build.first_error in {line.strip()[:300] for line in log.splitlines()}, build
    # the pin's hints first, then the generic ones: the first whose pattern is in the log
    patterns = [(h.pattern, h.hint) for h in load_pin("pufferlib-5.0").build_hints]
    hints = [hint for pattern, hint in [*patterns, *GENERIC_HINTS] if re.search(pattern, log)]
    assert hints, f"no hint for this failure: {log}"
    assert build.hint == hints[0]
    assert f"(hint: {hints[0]})" in verdict_of(report).summary
