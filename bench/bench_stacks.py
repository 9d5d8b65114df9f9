"""Stack-phase time of `sample_tree` per native backend, on real blocked processes:
threads64 (N pthreads waiting on a condition variable, built -g -O0) with 4, 16 and 64
threads, a Python process that imports torch and blocks (native + Python stacks), and a
tree of four 16-thread processes (dumped in parallel). Prints a table with each time's
ratio to gdb's, and the targets: <= 0.15 s for the 64-thread C process, <= 0.3 s for the
torch process (native + Python).

    .venv/bin/python bench/bench_stacks.py [--reps 3] [--json PATH]
    .venv/bin/python bench/bench_stacks.py --smoke     # one small case, a few seconds

The time is `SampleSet.timings["stacks"]` of a one-snapshot sample: everything the stack
phase costs (planning aside): the tools' runs, parsing, frame attribution. `tools s` sums
the tools' own runs (the "TOOL:PID" timings: py-spy, eu-stack or gdb, eu-addr2line); on
the tree it exceeds the phase's wall time because processes are dumped in parallel.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.sampling.sample import sample_tree
from harness.sampling.stacks import stack_workers

BUILD_PY = Path(__file__).resolve().parent.parent / "tests" / "programs" / "build.py"

TORCH_PROGRAM = """
import threading, torch
torch.set_num_threads(4)
torch.ones(256, 256) @ torch.ones(256, 256)  # the intra-op pool is up
done = threading.Event()
threading.Thread(target=done.wait, name="loader", daemon=True).start()
print("ready", flush=True)
done.wait()
"""
TREE_PROGRAM = (
    "import subprocess as s, sys; [p.wait() for p in [s.Popen(sys.argv[1:]) for _ in 'abcd']]"
)
# backend label -> sample_tree(native=...)
BACKENDS = {"gdb": "gdb", "eu-stack": "eu-stack"}
TARGETS = {("threads64", 64, "eu-stack"): 0.15, ("torch", 0, "eu-stack"): 0.3}


@dataclass
class Row:
    case: str
    threads: int  # of the sampled process (per process for the tree); 0: whatever it has
    backend: str
    stacks_s: list[float] = field(default_factory=list)
    tools_s: list[float] = field(default_factory=list)  # sum of the tools' own run times
    status: dict[str, str] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.stacks_s)


@contextlib.contextmanager
def started(argv: list[str], ready: str, count: int = 1, timeout: float = 120) -> Iterator[int]:
    """Run argv in its own session until `ready` was printed `count` times; kill it after."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        seen, deadline = b"", time.monotonic() + timeout
        while seen.count(ready.encode()) < count:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise SystemExit(f"{argv[0]} never printed {ready!r}: {seen!r}")
            if select.select([proc.stdout], [], [], left)[0]:
                seen += os.read(proc.stdout.fileno(), 65536)
        time.sleep(0.2)  # the last threads reach their wait
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def compile_c(name: str, out_dir: Path) -> Path:
    """tests/programs/build.py's compile_c (tests/programs is not a package)."""
    spec = importlib.util.spec_from_file_location("tests_programs_build", BUILD_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.compile_c(name, out_dir))


def measure(row: Row, pid: int, reps: int) -> Row:
    for _ in range(reps):
        s = sample_tree(pid, snapshots=1, interval=0.0, native=row.backend, stack_timeout=60.0)
        row.stacks_s.append(s.timings["stacks"])
        row.tools_s.append(sum(v for k, v in s.timings.items() if ":" in k))
        row.status = dict(s.tools)
    return row


def run_cases(args: argparse.Namespace, out_dir: Path) -> list[Row]:
    binary = str(compile_c("threads64", out_dir))
    backends = ["eu-stack"] if args.smoke else [b for b in BACKENDS if shutil.which(b)]
    rows: list[Row] = []
    for n in (4,) if args.smoke else (4, 16, 64):
        with started([binary, str(n)], f"all {n} waiting") as pid:
            rows += [measure(Row("threads64", n, b), pid, args.reps) for b in backends]
    if args.smoke:
        return rows
    tree = [sys.executable, "-c", TREE_PROGRAM, binary, "16"]
    with started(tree, "all 16 waiting", count=4) as pid:
        rows += [measure(Row("tree 4x", 16, b), pid, args.reps) for b in backends]
    if importlib.util.find_spec("torch") is None:
        print("torch not installed: torch case skipped", file=sys.stderr)
        return rows
    with started([sys.executable, "-W", "ignore", "-c", TORCH_PROGRAM], "ready") as pid:
        for b in backends:  # gdb reads libtorch's symbols: seconds per attach, so one rep
            rows.append(measure(Row("torch", 0, b), pid, 1 if b == "gdb" else args.reps))
    return rows


def table(rows: list[Row]) -> str:
    gdb = {(r.case, r.threads): r.median for r in rows if r.backend == "gdb"}
    lines = [
        f"{'case':<10} {'threads':>7} {'backend':<9} {'median s':>9} {'min s':>7} "
        f"{'tools s':>8} {'/ gdb':>7}  tools",
        "-" * 78,
    ]
    for r in rows:
        ratio = gdb.get((r.case, r.threads))
        lines.append(
            f"{r.case:<10} {r.threads or '-':>7} {r.backend:<9} {r.median:>9.3f} "
            f"{min(r.stacks_s):>7.3f} {statistics.median(r.tools_s):>8.3f} "
            f"{f'{r.median / ratio:.2f}x' if ratio else '-':>7}  "
            + ", ".join(f"{k}: {v}" for k, v in r.status.items())
        )
    return "\n".join(lines)


def targets(rows: list[Row]) -> list[dict[str, object]]:
    found = []
    for r in rows:
        limit = TARGETS.get((r.case, r.threads, r.backend))
        if limit is not None:
            median, low = round(r.median, 4), round(min(r.stacks_s), 4)
            found.append(
                {"case": r.case, "threads": r.threads, "backend": r.backend, "target_s": limit}
                | {"median_s": median, "min_s": low, "met": r.median <= limit}
            )
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="samples per case (default 3)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--smoke", action="store_true", help="one small case (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.reps = 1
    if not shutil.which("eu-stack"):
        print("eu-stack not found: nothing to measure", file=sys.stderr)
        return 0 if args.smoke else 1
    with tempfile.TemporaryDirectory(prefix="bench-stacks-") as tmp:
        rows = run_cases(args, Path(tmp))
    load = os.getloadavg()[0]
    print(f"stack phase, median of {args.reps}; {stack_workers()} workers; load {load:.1f}")
    print(table(rows))
    met = targets(rows)
    for t in met:
        mark = "met" if t["met"] else "MISSED"
        label = f"{t['case']} {t['threads'] or ''}".strip()
        print(f"target {label} ({t['backend']}) <= {t['target_s']} s: {t['median_s']} s {mark}")
    if args.json:
        machine = {"cpus": os.cpu_count(), "workers": stack_workers(), "load": load}
        data = {"machine": machine, "results": [asdict(r) for r in rows], "targets": met}
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
