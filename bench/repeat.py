"""Repeated runs: runs per second of `harness watch --repeat` beside a plain shell loop of
`timeout` runs, and the harness's memory with many retained run folders.

    .venv/bin/python bench/repeat.py [--runs 20] [--retained 100] [--program mutex_deadlock]
        [--cpus N] [--quiescent 1] [--json PATH] [--smoke]

The program is one of tests/programs (built with gcc -g -O0 -pthread into a temporary
folder): by default mutex_deadlock, which deadlocks at once, so every run is a hang and a
run's cost is the time to notice it; `--program cpu_sized --cpus 1` hangs for the reason
issue 19 is about (a pool sized from the affinity, a barrier from the CPUs online), and
`--program flaky_lockorder` hangs in about a third of runs.

Three ways to run it `--runs` times, one after the other:
- plain: `sh -c 'timeout T PROGRAM'` in a loop, T = --quiescent (what a person picks to
  call a silent run hung; the harness needs that much quiescence too), the affinity of
  --cpus applied to the shell (inherited);
- `harness watch --repeat RUNS --jobs 1` and `--jobs 2` (quiescence --quiescent, its other
  limits generous), each run a child harness with its own report folder.
Prints runs, hangs, wall time, runs per second and the ratio to the plain loop; the
harness's rate line (hangs with the 95% interval from repeat.json).

Memory: `harness watch --repeat RETAINED --jobs 2`, the peak RSS of the harness process
(the parent that schedules the runs and writes the aggregate; psutil, sampled every 50 ms)
and of its whole tree (the parent, its child harnesses and their programs, summed per
sample), the run folders it kept and their size on disk.

--smoke: 3 runs, 6 retained (CI). Numbers are for people; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "programs" / "build.py"
# generous limits but the one that decides a hang: a deadlocked C program is quiescent at
# once, so each run ends after --quiescent seconds of silence plus the diagnosis
LIMITS = ("--startup", "10", "--stall", "10", "--timeout", "60", "--quiet")


@dataclass
class Figures:
    """One way of running the program `runs` times."""

    label: str
    runs: int
    hangs: int
    wall_s: float
    runs_per_s: float = 0.0
    vs_plain: float = 0.0
    rate_text: str = ""
    exit_code: int | None = None
    peak_rss_mb: float = 0.0
    tree_peak_rss_mb: float = 0.0
    run_folders: int = 0
    folders_mb: float = 0.0
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def build(name: str, out_dir: Path) -> Path:
    done = subprocess.run(
        [sys.executable, str(BUILD), str(out_dir), name],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"building {name} failed:\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


def first_cpus(n: int | None) -> set[int] | None:
    """The first n CPUs this process may use (what `harness --cpus N` takes), None: all."""
    if n is None:
        return None
    mine = sorted(os.sched_getaffinity(0))
    if not 0 < n <= len(mine):
        sys.exit(f"--cpus {n}: this process may use {len(mine)} CPUs")
    return set(mine[:n])


def plain_loop(program: Path, runs: int, timeout_s: float, cpus: set[int] | None) -> Figures:
    """`timeout T PROGRAM` RUNS times in one shell; the shell prints each exit status."""
    script = (
        f'i=0; while [ "$i" -lt {runs} ]; do timeout -s KILL {timeout_s:g} "$0" >/dev/null 2>&1;'
        " echo $?; i=$((i + 1)); done"
    )

    def pin() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    t0 = time.monotonic()
    done = subprocess.run(
        ["sh", "-c", script, str(program)],
        capture_output=True,
        text=True,
        timeout=runs * (timeout_s + 30),
        preexec_fn=pin,
        check=False,
    )
    wall = time.monotonic() - t0
    codes = [int(line) for line in done.stdout.split()]
    # timeout -s KILL: a run it had to kill exits 137 (128 + SIGKILL)
    hangs = sum(code == 137 for code in codes)
    return Figures(
        f"plain loop: timeout {timeout_s:g}", len(codes), hangs, wall,
        rate_text=f"hang {hangs}/{len(codes)}", exit_code=done.returncode,
    )  # fmt: skip


def sample_rss(pid: int, stop: threading.Event, peaks: list[int]) -> None:
    """peaks[0]: the largest RSS of `pid` seen; peaks[1]: of pid and all its descendants,
    summed per sample. Until `stop` or the process is gone."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.is_set():
        try:
            own = proc.memory_info().rss
            tree = own
            for child in proc.children(recursive=True):
                try:
                    tree += child.memory_info().rss
                except psutil.Error:
                    continue  # gone between the listing and the read
        except psutil.Error:
            return
        peaks[0], peaks[1] = max(peaks[0], own), max(peaks[1], tree)
        stop.wait(0.05)


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def under_harness(
    program: Path, runs: int, jobs: int, args: argparse.Namespace, reports: Path
) -> Figures:
    argv = [sys.executable, "-m", "harness", "watch", "--repeat", str(runs), "--jobs", str(jobs)]
    argv += [*LIMITS, "--quiescent", f"{args.quiescent:g}"]
    argv += ["--cpus", str(args.cpus)] if args.cpus is not None else []
    argv += ["--report-dir", str(reports), "--", str(program)]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stop, peaks = threading.Event(), [0, 0]
    sampler = threading.Thread(target=sample_rss, args=(proc.pid, stop, peaks), daemon=True)
    sampler.start()
    out, err = proc.communicate(timeout=runs * 120 + 60)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    label = f"harness watch --repeat {runs} --jobs {jobs}"
    found = sorted(reports.glob("*/repeat.json"))
    if not found:
        tail = (err or out)[-600:]
        return Figures(label, 0, 0, wall, exit_code=proc.returncode, stderr_tail=tail)
    data: dict[str, Any] = json.loads(found[0].read_text())
    counts: dict[str, int] = data.get("counts", {})
    done_runs = int(data.get("runs", 0))
    hangs = int(counts.get("hang", 0))
    lo, hi = data.get("hang_rate_ci95", [0.0, 0.0])
    rate = f"hang {hangs}/{done_runs} (95% CI {100 * lo:.0f}–{100 * hi:.0f}%)"
    folders = [p for p in (found[0].parent / "runs").glob("*") if p.is_dir()]
    return Figures(
        label,
        done_runs,
        hangs,
        wall,
        rate_text=rate,
        exit_code=proc.returncode,
        peak_rss_mb=peaks[0] / 2**20,
        tree_peak_rss_mb=peaks[1] / 2**20,
        run_folders=len(folders),
        folders_mb=folder_bytes(found[0].parent) / 1e6,
        stderr_tail=err[-600:] if proc.returncode not in (0, 2) else "",
        extra={"counts": counts, "groups": len(data.get("groups", []))},
    )


def has_repeat() -> bool:
    """`harness watch --help` lists --repeat (the option may not exist in this checkout).
    A help that fails to print says nothing either way: then try."""
    done = subprocess.run(
        [sys.executable, "-m", "harness", "watch", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        print(f"(harness watch --help failed: {done.stderr.strip()[:200]}; trying --repeat)")
        return True
    return "--repeat" in done.stdout


def print_table(rows: list[Figures]) -> None:
    print(f"{'':44} {'runs':>5} {'hangs':>6} {'wall s':>8} {'runs/s':>7} {'vs plain':>9}")
    for r in rows:
        print(
            f"{r.label:44} {r.runs:5d} {r.hangs:6d} {r.wall_s:8.1f} {r.runs_per_s:7.2f} "
            f"{r.vs_plain:8.2f}x  {r.rate_text}"
        )
        if r.stderr_tail:
            print(f"    exit {r.exit_code}: {r.stderr_tail.strip()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=20, help="runs of each way (default 20)")
    ap.add_argument("--retained", type=int, default=100, help="runs of the memory case")
    ap.add_argument("--program", default="mutex_deadlock", help="a C program of tests/programs")
    ap.add_argument("--cpus", type=int, default=None, help="the first N CPUs only (--cpus N)")
    ap.add_argument("--quiescent", type=float, default=1.0, help="seconds (and plain timeout)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="3 runs, 6 retained (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.retained = 3, 6
    if not has_repeat():
        sys.exit("harness watch has no --repeat in this checkout: nothing to measure")
    cpus = first_cpus(args.cpus)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-repeat-") as t:
        tmp = Path(t)
        program = build(args.program, tmp / "bin")
        where = f" on CPUs {sorted(cpus)}" if cpus else ""
        print(
            f"program: {args.program}{where}, {args.runs} runs each way, quiescence "
            f"{args.quiescent:g} s; {os.cpu_count()} CPUs online, load {load:.2f}"
        )
        rows = [plain_loop(program, args.runs, args.quiescent, cpus)]
        for jobs in (1, 2):
            rows.append(under_harness(program, args.runs, jobs, args, tmp / f"jobs{jobs}"))
        for r in rows:
            r.runs_per_s = r.runs / r.wall_s if r.wall_s else 0.0
            r.vs_plain = r.runs_per_s / rows[0].runs_per_s if rows[0].runs_per_s else 0.0
        print_table(rows)
        memory = under_harness(program, args.retained, 2, args, tmp / "retained")
    print(
        f"memory, --repeat {args.retained} --jobs 2: harness process peak RSS "
        f"{memory.peak_rss_mb:.0f} MB (its whole tree {memory.tree_peak_rss_mb:.0f} MB), "
        f"{memory.run_folders} run folders kept ({memory.folders_mb:.1f} MB on disk), "
        f"{memory.wall_s:.1f} s, {memory.rate_text}"
    )
    if memory.stderr_tail:
        print(f"    exit {memory.exit_code}: {memory.stderr_tail.strip()}")
    if args.json is not None:
        result = {
            "program": args.program,
            "cpus": sorted(cpus) if cpus else None,
            "runs": args.runs,
            "quiescent_s": args.quiescent,
            "load_at_start": load,
            "throughput": [asdict(r) for r in rows],
            "memory": asdict(memory),
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    failed = [r for r in [*rows, memory] if r.runs == 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
