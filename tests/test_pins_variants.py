"""Pins, drift, variants, the build cache and `harness compare` on the replica (issue 3).
Real builds and runs; a per-module build cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.build import BuildResult
from harness.config.pin import PIN_SCHEMA_VERSION, load_pin, pin_dir
from harness.outcome import Kind
from harness.report.load import load_report
from harness.vocab import FileStatus, SourceStatus
from tests.harness_cli import ROOT, HarnessResult, harness, run_replica, verdict_of

pytestmark = [pytest.mark.timeout(300), pytest.mark.spread]
# the stock replica hangs for real only where gcc's OpenMP is GNU libgomp (its fork hazard)
stock_hang = pytest.mark.usefixtures("libgomp_fork_hazard")
REPLICA = pin_dir() / "replica"


def copy_of_replica(tmp_path: Path) -> Path:
    """A pin file named `replica` whose source is a private copy of the replica."""
    src = tmp_path / "replica-src"
    shutil.copytree(REPLICA, src, ignore=shutil.ignore_patterns("puffer", "logs", "checkpoints"))
    text = (pin_dir() / "replica.toml").read_text().replace('path = "replica"', f'path = "{src}"')
    pin = tmp_path / "replica.toml"
    pin.write_text(text)
    return pin


def build_of(res: HarnessResult) -> BuildResult:
    """The run's build, read typed; fails when the report has none."""
    build = res.loaded.build
    assert build is not None, f"no build: {res.stderr}"
    return build


def test_shipped_replica_pin_is_verified() -> None:
    res = harness("pin", "verify", "--pin", "replica", report_root=Path("."))
    assert res.code == 0, res.stdout
    assert res.stdout.startswith("pin replica: VERIFIED")


def test_one_byte_of_drift_is_named_and_refused(tmp_path: Path) -> None:
    pin = copy_of_replica(tmp_path)
    header = tmp_path / "replica-src" / "src" / "vecenv.h"
    header.write_bytes(header.read_bytes().replace(b"env_start", b"env_Start", 1))
    res = harness("pin", "verify", "--pin", str(pin), report_root=tmp_path)
    assert res.code == 1
    drift = [line for line in res.stdout.splitlines() if line.startswith("  DRIFT")]
    assert len(drift) == 1 and "src/vecenv.h" in drift[0]
    pinned = load_pin(str(pin)).files["src/vecenv.h"]
    assert pinned in drift[0]
    res = harness("run", "breakout", "--pin", str(pin), report_root=tmp_path / "r")
    assert res.code == 5
    assert "does not match the pin" in res.stderr and "src/vecenv.h" in res.stderr
    report = load_report(next((tmp_path / "r").glob("*/report.json")))
    assert report.pin is not None, report.notes
    assert report.pin.verification_status == SourceStatus.DRIFT


@pytest.mark.slow
def test_allow_drift_runs_and_records_it(tmp_path: Path, cache_env: dict[str, str]) -> None:
    pin = copy_of_replica(tmp_path)
    cfg = tmp_path / "replica-src" / "config" / "breakout.ini"
    cfg.write_text(cfg.read_text() + "\n# a local edit\n")
    res = run_replica(
        tmp_path / "r",
        cache_env,
        "--pin",
        str(pin),
        "--allow-drift",
        "--variant",
        "fixed",
        "--steps",
        "262144",
    )
    assert res.code == 0, res.stderr
    pin_info = res.loaded.pin
    assert pin_info is not None and pin_info.verification is not None, pin_info
    assert pin_info.verification_status == SourceStatus.DRIFT
    files = pin_info.verification["files"]  # the verification is kept as written (PinInfo)
    differs = [f["path"] for f in files if f["status"] == FileStatus.DIFFERS]
    assert differs == ["config/breakout.ini"], differs


@pytest.mark.slow
def test_build_cache_hit_then_miss_on_a_source_byte(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    pin = copy_of_replica(tmp_path)
    args = ("run", "breakout", "--pin", str(pin), "--variant", "fixed", "--steps", "262144")
    first = build_of(harness(*args, report_root=tmp_path / "a", env=cache_env))
    second = build_of(harness(*args, report_root=tmp_path / "b", env=cache_env))
    assert second.cache_hit and second.key == first.key
    learner = tmp_path / "replica-src" / "src" / "learner.h"
    learner.write_text(learner.read_text() + "\n")
    third = build_of(harness(*args, "--allow-drift", report_root=tmp_path / "c", env=cache_env))
    assert not third.cache_hit and third.key != first.key


@pytest.mark.slow
def test_omp_free_changes_exactly_the_two_regions(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = harness("build", "breakout", "--variant", "omp-free", report_root=tmp_path, env=cache_env)
    assert res.code == 0, res.stderr
    tree = Path(res.stdout.splitlines()[0].rsplit(": ", 1)[1].strip())
    changed = [
        ln
        for ln in (tree / "src" / "vecenv.h").read_text().splitlines()
        if "[harness omp-free]" in ln
    ]
    assert len(changed) == 2
    assert all("#pragma omp parallel for" in ln for ln in changed)
    untouched = [
        ln for ln in (tree / "src" / "puffer.c").read_text().splitlines() if "#pragma omp" in ln
    ]
    assert untouched, "the warm-up region outside the two functions keeps its OpenMP"


@pytest.mark.slow
@stock_hang
def test_compare_confirms_the_fix(tmp_path: Path, cache_env: dict[str, str]) -> None:
    """The default `--repeat auto`: four runs each (hang 4/4 against pass 4/4 is the fewest
    that separate at 95%), two at once, then confirmed."""
    res = harness(
        "compare", "breakout", "--startup", "8", "--jobs", "2",
        report_root=tmp_path, env=cache_env, timeout=400,
    )  # fmt: skip
    assert res.code == 0, res.stdout + res.stderr
    data = json.loads(next(tmp_path.glob("*/compare.json")).read_text())
    stock, fixed = data["variants"]
    assert (stock["kind"], stock["location"], stock["kinds"]) == ("hang", "env_start", {"hang": 4})
    assert fixed["kinds"] == {"pass": 4} and fixed["epochs"] >= 4
    assert data["confirmed"] and data["decision"] == "confirmed"
    assert data["summary"].startswith("fix confirmed: stock → hang 4/4 (100%, 95% CI 51–100%)")
    assert len(list(Path(stock["report_dir"], "runs").iterdir())) == 4


@pytest.mark.slow
@stock_hang
def test_worker_region_hang_is_located_in_vec_thread_main(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    res = run_replica(
        tmp_path,
        cache_env,
        "--variant",
        "omp-free:omp-free-env-start+patch:fixes/replica-guards.patch",
        "--arg=--vec.inline-buffer=1",
        "--startup",
        "8",
    )
    v = verdict_of(res.loaded)
    assert res.code == 2, v
    assert (v.kind, v.location) == (Kind.HANG, "vec_thread_main")


def test_bad_pin_and_variant_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f"schema_version = {PIN_SCHEMA_VERSION}\nname = [\n")
    for args, text in [
        (("pin", "show", "--pin", str(bad)), "malformed TOML"),
        (("run", "breakout", "--variant", "nope"), "unknown variant 'nope'"),
        (("run", "breakout", "--variant", f"patch:{bad}"), "does not apply"),
        (
            ("run", "breakout", "--pin", "pufferlib-5.0", "--checkout", str(tmp_path)),
            "not a git repository",
        ),
        (("build", "breakout", "--variant", "patch:/no/such.patch"), "patch file not found"),
    ]:
        res = harness(*args, report_root=tmp_path / "r")
        assert res.code == 5, (args, res.stderr)
        assert text in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


# ------------------------------------------------------------ the build cache, two processes

_BUILDER = """
import json, sys
from pathlib import Path
from harness.build import build, copy_source, new_scratch_tree
from harness.config.pin import load_pin
pin = load_pin(sys.argv[1])
prepared = new_scratch_tree()
copy_source(Path(sys.argv[2]), prepared)
print("building", flush=True)
res = build(prepared, pin, "breakout", {})
print(json.dumps({"ok": res.ok, "hit": res.cache_hit, "key": res.key, "tree": str(res.tree)}))
"""


def _waiting_on_a_flock(pid: int) -> bool:
    """`pid` is blocked on a flock: /proc/locks lists a waiter as `N: -> FLOCK ... PID ...`."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid):
            return True
    return False


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout}s")
        time.sleep(0.05)


def test_two_processes_building_one_key_build_it_once(tmp_path: Path) -> None:
    """Two harness processes build the same key at once: the second waits on the key's lock
    while the first builds (seen in /proc/locks), then reuses that build; the build command
    ran once and the marker is whole."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "build.sh").write_text(
        'echo "$$" >> "$BUILDS"\n'
        'touch "$STARTED"\n'
        'while [ ! -e "$GO" ]; do sleep 0.05; done\n'  # held until the test lets it finish
        "echo built > out\n"
    )
    pin = tmp_path / "two.toml"
    pin.write_text(
        "schema_version = 1\n"
        'name = "two"\nenvs = ["breakout"]\nparser = "puffer5"\n'
        f'[source]\nkind = "path"\npath = "{src}"\n'
        '[build]\ncommand = "bash build.sh"\ntimeout_s = 60\noutputs = ["out"]\n'
        '[run]\ncommand = "./out"\n'
    )
    env = {
        **os.environ,
        "HARNESS_CACHE_DIR": str(tmp_path / "cache"),
        "BUILDS": str(tmp_path / "builds.txt"),
        "STARTED": str(tmp_path / "started"),
        "GO": str(tmp_path / "go"),
    }

    def start() -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", _BUILDER, str(pin), str(src)]
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)

    first = start()
    second: subprocess.Popen[str] | None = None
    try:
        _wait((tmp_path / "started").exists, 60, "the first build did not start")
        second = start()
        _wait(lambda: _waiting_on_a_flock(second.pid), 60, "the second never waited on the lock")
        (tmp_path / "go").touch()
        one, two = (
            json.loads(p.communicate(timeout=60)[0].splitlines()[-1]) for p in (first, second)
        )
    finally:
        # a killed builder's reaper kills its build script too; this covers a builder that
        # ended another way (the test failed first): let the held script end by itself
        (tmp_path / "go").touch()
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert (one["ok"], one["hit"], two["ok"], two["hit"]) == (True, False, True, True)
    assert one["key"] == two["key"] and one["tree"] == two["tree"]
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1  # built once
    marker = json.loads((Path(one["tree"]) / ".harness-build.json").read_text())
    assert marker["key"] == one["key"]
