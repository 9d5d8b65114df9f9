"""Real third-party test suites with and without `pytest --hang-watch` (and with `-n 2`): the
outcome counts must be identical, the wall time within 5%, and the plugin must report
nothing (no verdict, no warning) on suites that do not hang.

The suites, from their PyPI sdists at pinned versions (each ships its tests), by shape:
asgiref (threads and asyncio: sync_to_async, thread-sensitive executors), execnet
(subprocesses: popen gateways, channels), pebble (fork, forkserver and spawn process pools),
fasteners (threads and inter-process file locks, eventlet), aiofiles (asyncio over a thread
pool).

It fetches each sdist (`pip download`) and makes a venv of its own (pytest, xdist,
pytest-timeout, the suites' test dependencies, the harness's; this checkout's `harness` by a
.pth file) under $HARNESS_SUITES_CACHE, else ~/.cache/puffer-harness/real-suites; later runs
are offline. Each suite runs in four modes side by side (plain, --hang-watch, -n 2,
--hang-watch -n 2; --repeat N rounds: medians). Printed (Markdown, also --out FILE; figures
to --json FILE): per suite and mode the counts, the wall time and its ratio to the plain
run, the watchers' CPU (sampled from /proc: the watcher is outside pytest's tree), pytest's
own CPU, the tests whose outcome differs, what the plugin said (its summary, report folders).

    .venv/bin/python bench/real_suites.py [--suites asgiref,execnet] [--repeat 3]
    .venv/bin/python bench/real_suites.py --smoke --json F   # pebble's fork files, this venv

Exit status: 0 when every suite ran (the figures say whether they matched), 3 when a suite
or the venv could not be fetched (no network, no cache), 1 on another failure."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIP_S = 600  # one pip command: a download or the venv's install
RUN_S = 900  # one suite run
BASE = ["pytest==9.1.1", "pytest-xdist==3.8.0", "pytest-timeout==2.4.0", "execnet==2.1.2"]
MODES = {
    "plain": [],
    "watch": ["--hang-watch"],
    "plain -n 2": ["-n", "2"],
    "watch -n 2": ["--hang-watch", "-n", "2"],
}
COUNT_WORDS = ("passed", "failed", "skipped", "errors", "xfailed", "xpassed", "rerun")


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    shape: str
    paths: list[str]
    pythonpath: str  # where its package is in the sdist
    deps: list[str] = field(default_factory=list)
    # timing-flaky upstream, with or without the plugin: deselected in every mode
    flaky: list[str] = field(default_factory=list)


SUITES = [
    Suite("asgiref", "3.13.0", "threads + asyncio", ["tests"], ".", ["pytest-asyncio==1.5.0"]),
    Suite(
        "execnet",
        "2.1.2",
        "subprocesses (popen gateways)",
        ["testing"],
        "src",
        # races of its own, with or without the plugin (failed or flipped in plain runs
        # here): a send right after the remote's SIGTERM (2 of 12 plain runs), a cwd read
        # while another thread of the remote changes it (1 of 20), a channel passed on under
        # load, and the tests it marks xfail itself for "timing problems" (xfail or xpass);
        # and a terminate that takes 0.08 s or 5.1 s (its remote's receive started first or
        # not: 5 of 6 plain runs of its file slow, 4 of 6 with --hang-watch), which would
        # swing a wall ratio by 10%
        flaky=[
            f"testing/{t}"
            for t in (
                "test_gateway.py::TestPopenGateway::test_waitclose_on_remote_killed",
                "test_gateway.py::TestBasicGateway::test__rinfo",
                "test_gateway.py::TestBasicGateway::test_gateway_status_busy",
                "test_gateway.py::TestThreads::test_status_with_threads",
                "test_gateway.py::TestTracing::test_popen_stderr_tracing",
                "test_channel.py::TestChannelBasicBehaviour::test_channel_passing_over_channel",
                "test_xspec.py::TestMakegateway::test_popen_nice",
                "test_termination.py::test_termination_on_remote_channel_receive",
            )
        ],
    ),
    Suite("pebble", "5.2.3", "fork/forkserver/spawn pools", ["test"], "."),
    Suite(
        "fasteners",
        "0.20",
        "threads + file locks (eventlet)",
        ["tests"],
        ".",
        ["diskcache==5.6.3", "eventlet==0.41.3", "more-itertools==11.2.1"],
    ),
    Suite(
        "aiofiles", "25.1.0", "asyncio + thread pool", ["tests"], "src", ["pytest-asyncio==1.5.0"]
    ),
]
SMOKE = Suite(
    "pebble",
    "5.2.3",
    "fork and thread pools (subset)",
    [
        "test/test_pebble.py",
        "test/test_concurrent_thread.py",
        "test/test_asynchronous_thread.py",
        "test/test_concurrent_process_fork.py",
    ],
    ".",
)


class FetchError(Exception):
    """A sdist or the venv could not be had (no network and nothing cached)."""


def cache_dir() -> Path:
    base = os.environ.get("HARNESS_SUITES_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "puffer-harness" / "real-suites"


def _pip(python: str, args: list[str]) -> None:
    try:
        res = subprocess.run(
            [python, "-m", "pip", *args], capture_output=True, text=True, timeout=PIP_S
        )
    except subprocess.TimeoutExpired as exc:
        raise FetchError(f"pip {args[0]} took over {PIP_S} s") from exc
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-5:])
        raise FetchError(f"pip {' '.join(args[:3])} failed:\n{tail}")


def fetch(suite: Suite, cache: Path, python: str) -> Path:
    """The suite's unpacked sdist (downloaded once)."""
    sdists = cache / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    pattern = f"{suite.name.lower()}-{suite.version}.tar.gz"
    found = [p for p in sdists.iterdir() if p.name.lower() == pattern]
    if not found:
        _pip(
            python,
            ["download", "--no-deps", "--no-binary", suite.name, "-d", str(sdists),
             f"{suite.name}=={suite.version}"],
        )  # fmt: skip
        found = [p for p in sdists.iterdir() if p.name.lower() == pattern]
        if not found:
            raise FetchError(f"pip left no {pattern} in {sdists}")
    tree = cache / "src" / f"{suite.name}-{suite.version}"
    if not (tree / ".unpacked").exists():
        shutil.rmtree(tree, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(found[0]) as tar:
            tar.extractall(tmp, filter="data")
            (top,) = list(Path(tmp).iterdir())
            tree.parent.mkdir(parents=True, exist_ok=True)
            top.rename(tree)
        (tree / ".unpacked").write_text("")
    return tree


def venv(cache: Path, suites: list[Suite]) -> str:
    """The bench's own venv: its python, made (again) when its requirements changed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = sorted({*BASE, *project["dependencies"], *(d for s in suites for d in s.deps)})
    digest = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    home = cache / "venv"
    python = str(home / "bin" / "python")
    ready = home / f".ready-{digest}"
    if not ready.exists():
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=PIP_S)
        _pip(python, ["install", "-q", *reqs])
        ready.write_text("\n".join(reqs) + "\n")
    # this checkout's harness, the working tree as it is now (no build, no copy)
    link = cache / "checkout"
    link.mkdir(exist_ok=True)
    target = link / "harness"
    if target.is_symlink() or target.exists():
        target.unlink()
    target.symlink_to(ROOT / "harness")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "puffer_harness_checkout.pth").write_text(f"{link}\n")
    return python


@dataclass
class Run:
    suite: str
    mode: str
    rc: int
    wall_s: float
    counts: dict[str, int]
    outcomes: dict[str, str]  # JUnit: test → passed/failed/skipped/error
    watcher_cpu_s: float
    pytest_cpu_s: float
    said: list[str]  # the plugin's lines: its summary section, verdicts
    reports: int  # report folders (a verdict each)


def _watchers(marker: bytes) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"harness.pytest_plugin.watcher" not in f.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read():
                    out.append(int(entry))
        except OSError:
            continue
    return out


def _cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class CpuSampler(threading.Thread):
    """The watchers' CPU, from /proc every 0.2 s: the last sample of each (a watcher idles
    at its end, so little is missed)."""

    def __init__(self, marker: bytes) -> None:
        super().__init__(daemon=True)
        self.marker = marker
        self.seen: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            for pid in _watchers(self.marker):
                cpu = _cpu(pid)
                if cpu is not None:
                    self.seen[pid] = cpu


def _counts(out: str) -> dict[str, int]:
    lines = [ln for ln in out.splitlines() if re.search(r"\b(passed|failed|error|skipped)", ln)]
    found: dict[str, int] = {}
    for n, word in re.findall(r"(\d+) (\w+)", lines[-1] if lines else ""):
        word = "errors" if word == "error" else word
        if word in COUNT_WORDS:
            found[word] = int(n)
    return found


def _junit(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with contextlib.suppress(OSError, ET.ParseError):
        for case in ET.parse(path).getroot().iter("testcase"):
            key = f"{case.get('classname')}::{case.get('name')}"
            kinds = [k for k in ("failure", "error", "skipped") if case.find(k) is not None]
            out[key] = kinds[0] if kinds else "passed"
    return out


def _said(out: str, reports: Path) -> tuple[list[str], int]:
    lines = [ln.strip() for ln in out.splitlines() if "hang-watch" in ln]
    said = [ln for ln in lines if not ln.startswith("hang-watch: quiescent")]
    folders = [p for p in reports.iterdir() if p.name != ".hang-watch"] if reports.is_dir() else []
    return said, len(folders)


def run(suite: Suite, tree: Path, python: str, mode: str, tmp: Path) -> Run:
    junit, reports = tmp / "junit.xml", tmp / "reports"
    marker = f"HANG_BENCH_SUITE={uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HANG_"))}
    env["PYTHONPATH"] = str(tree / suite.pythonpath)
    env["HANG_BENCH_SUITE"] = marker.split("=", 1)[1]
    plugin = [] if python == sys.executable else ["-p", "harness.pytest_plugin.plugin"]
    cmd = [python, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q", "-rN"]
    cmd += [f"--junitxml={junit}", f"--hang-report-dir={reports}", *MODES[mode]]
    cmd += [f"--deselect={t}" for t in suite.flaky] + suite.paths
    sampler = CpuSampler(marker.encode())
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(0.3)  # a last sample: the watchers end within a look of pytest's exit
    sampler.done.set()
    sampler.join()
    for pid in _watchers(marker.encode()):  # none should be left; the bench leaves none
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    said, folders = _said(text, reports)
    return Run(
        suite.name,
        mode,
        proc.returncode,
        wall,
        _counts(text),
        _junit(junit),
        sum(sampler.seen.values()),
        (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        said,
        folders,
    )


def table(runs: list[Run]) -> list[str]:
    """One row per suite and mode: the median wall time and watcher CPU over the rounds,
    each round's outcomes against the plain run of the same round (alone or -n 2)."""
    lines = [
        "| suite | mode | passed / failed / skipped / errors (xfail, xpass) | same as plain | "
        "wall (median) | ratio | watcher CPU | pytest CPU | plugin said |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.suite, r.mode), []).append(r)
    walls: dict[str, list[float]] = {}
    for (suite, mode), rs in groups.items():
        refs = groups[(suite, "plain -n 2" if "-n 2" in mode else "plain")]
        pairs = list(zip(rs, refs, strict=False))  # each round against its own plain run
        differ = sorted({k for r, ref in pairs for k in ref.outcomes.keys() | r.outcomes.keys()
                         if ref.outcomes.get(k) != r.outcomes.get(k)})  # fmt: skip
        alike = all(r.counts == ref.counts for r, ref in pairs)
        same = "yes" if alike and not differ else f"no: {differ[:3]}"
        c = rs[0].counts
        main = "/".join(str(c.get(w, 0)) for w in ("passed", "failed", "skipped", "errors"))
        extra = f" ({c.get('xfailed', 0)}, {c.get('xpassed', 0)})" if "xfailed" in c else ""
        said = "; ".join(dict.fromkeys(x for r in rs for x in r.said)) or "-"
        if any(r.reports for r in rs):
            said += f" {sum(r.reports for r in rs)} report folder(s)"
        wall = statistics.median(r.wall_s for r in rs)
        ref_wall = statistics.median(r.wall_s for r in refs)
        walls.setdefault(mode, []).append(wall)
        lines.append(
            f"| {suite} | {mode} | {main}{extra} | {same} | {wall:.1f} s | "
            f"{wall / ref_wall:.3f} | {statistics.median(r.watcher_cpu_s for r in rs):.1f} s | "
            f"{statistics.median(r.pytest_cpu_s for r in rs):.1f} s | {said} |"
        )
    for mode, ws in walls.items():
        base: list[float] = walls.get("plain -n 2" if "-n 2" in mode else "plain", ws)
        total, base_total = sum(ws), sum(base)
        ratio = total / base_total if len(base) == len(ws) and base_total > 0 else 1.0
        lines.append(f"| all | {mode} | | | {total:.1f} s | {ratio:.3f} | | | |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", help="comma-separated names (default: all)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    ap.add_argument("--smoke", action="store_true", help="pebble's fork files, this venv")
    ap.add_argument("--repeat", type=int, default=1, help="rounds (medians in the table)")
    ap.add_argument("--out", type=Path, help="the Markdown table to this file too")
    ap.add_argument("--json", type=Path, help="the figures as JSON to this file")
    a = ap.parse_args()
    cache = cache_dir()
    modes = [m.strip() for m in a.modes.split(",") if m.strip() in MODES]
    if a.smoke:
        suites = [SMOKE]
    else:
        names = set(a.suites.split(",")) if a.suites else {s.name for s in SUITES}
        suites = [s for s in SUITES if s.name in names]
    try:
        python = sys.executable if a.smoke else venv(cache, SUITES)  # one venv for any selection
        trees = {s.name: fetch(s, cache, sys.executable) for s in suites}
    except (FetchError, subprocess.SubprocessError, OSError) as exc:
        print(f"real_suites: cannot fetch: {exc}", file=sys.stderr)
        return 3
    runs: list[Run] = []
    # rounds one after the other, each suite's modes side by side: a load that comes and
    # goes on a shared machine touches both sides of a ratio
    order = [(s, m) for _ in range(max(1, a.repeat)) for s in suites for m in modes]
    for suite, mode in order:
        with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
            r = run(suite, trees[suite.name], python, mode, Path(tmp))
        runs.append(r)
        counts = " ".join(f"{n} {w}" for w, n in r.counts.items())
        print(f"{suite.name} [{mode}]: {counts}, {r.wall_s:.1f} s, "
              f"watcher {r.watcher_cpu_s:.1f} CPU-s, said {r.said or '-'}",
              file=sys.stderr, flush=True)  # fmt: skip
    head = [f"{s.name} {s.version}: {s.shape}" for s in suites]
    text = "\n".join(["; ".join(head), "", *table(runs)]) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    if a.json:
        a.json.write_text(json.dumps([r.__dict__ for r in runs], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
