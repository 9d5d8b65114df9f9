"""`harness attach PID` vs what a person reaches for on a tree that is hung right now:
`py-spy dump --native --pid P` and `gdb -batch -ex "thread apply all bt" -p P`, each run on
every process of the tree in turn (as by hand). On the same live hung trees (started here,
killed after):

- C lock cycle: tests/programs/mutex_deadlock.c
- Python deadlock: tests/programs/py_deadlock.py
- parent waiting on a stuck child: tests/programs/fork_deadlock.c (C) and
  tests/programs/py_wait_stuck_child.py (Python)
- /proc only: the C lock cycle (root's) looked at by uid 65534 (`setpriv`), where ptrace is
  refused; only when run as root with setpriv on PATH

Prints one Markdown table: the median wall time of each tool over the tree (of --reps) and
what it names: the function the stuck threads are in, the owners' tids, a cause, the child
the hang is in.

    .venv/bin/python bench/attach.py [--reps 3] [--quiescent 1] [--json PATH]
    .venv/bin/python bench/attach.py --quick     # one case, one rep (also --smoke)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
NOBODY = ["--reuid", "65534", "--regid", "65534", "--clear-groups"]
TOOL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    ready: str  # printed (`count` times) once the hang is in place
    count: int
    functions: tuple[str, ...]  # where the stuck threads are
    child: bool = False  # the hang is in a child of the target
    as_nobody: bool = False  # the tools run as uid 65534: ptrace refused


@dataclass
class Row:
    case: str
    tool: str
    walls: list[float] = field(default_factory=list)
    function: str = "-"
    owners: str = "-"
    cause: str = "-"
    child: str = "-"
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.walls) if self.walls else float("nan")


def compile_c(name: str, out_dir: Path) -> str:
    """tests/programs/build.py's compile_c (tests/programs is not a package)."""
    spec = importlib.util.spec_from_file_location("tests_programs_build", PROGRAMS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.compile_c(name, out_dir))


def cases(out_dir: Path, quick: bool) -> list[Case]:
    py = sys.executable
    c_funcs = ("transfer_a_to_b", "transfer_b_to_a")
    fork_funcs = ("take_a_then_b", "take_b_then_a")
    lock_cycle = Case("C lock cycle", [compile_c("mutex_deadlock", out_dir)], "holds", 2, c_funcs)
    if quick:
        return [lock_cycle]
    found = [
        lock_cycle,
        Case("Python deadlock", [py, str(PROGRAMS / "py_deadlock.py")], "holds", 2, c_funcs),
        Case(
            "C parent, stuck child",
            [compile_c("fork_deadlock", out_dir)],
            "supervising worker",
            1,
            fork_funcs,
            child=True,
        ),
        Case(
            "Python parent, stuck child",
            [py, str(PROGRAMS / "py_wait_stuck_child.py")],
            "holds",
            2,
            c_funcs,
            child=True,
        ),
    ]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        found.append(replace(lock_cycle, name="/proc only (ptrace refused)", as_nobody=True))
    else:
        print("not root or no setpriv: the /proc-only case is skipped", file=sys.stderr)
    return found


@contextlib.contextmanager
def started(case: Case) -> Iterator[int]:
    """The case's program in its own session until its hang is in place; killed after."""
    proc = subprocess.Popen(
        case.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        seen, deadline = b"", time.monotonic() + 60
        while seen.count(case.ready.encode()) < case.count:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise SystemExit(f"{case.argv[0]} never printed {case.ready!r}: {seen!r}")
            if select.select([proc.stdout], [], [], left)[0]:
                seen += os.read(proc.stdout.fileno(), 65536)
        time.sleep(0.3)  # the last threads reach their wait
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def tree(pid: int) -> list[int]:
    root = psutil.Process(pid)
    return [pid, *(c.pid for c in root.children(recursive=True))]


def tool_path(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if os.access(beside, os.X_OK) else None)


def run_timed(argv: list[str], prefix: list[str]) -> tuple[float, str, int]:
    start = time.monotonic()
    try:
        out = subprocess.run(
            [*prefix, *argv],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TOOL_TIMEOUT_S,
            cwd=ROOT,
        )
        return time.monotonic() - start, out.stdout + out.stderr, out.returncode
    except subprocess.TimeoutExpired:
        return time.monotonic() - start, "timed out", -1


def per_process(row: Row, case: Case, pid: int, argv_of: list[str], prefix: list[str]) -> str:
    """The tool on each process of the tree, one after the other: one rep's wall time."""
    wall, text, failed = 0.0, "", []
    procs = tree(pid)
    for p in procs:
        argv = [a.replace("{pid}", str(p)) for a in argv_of]
        took, out, code = run_timed(argv, prefix)
        wall += took
        text += f"\n=== pid {p} (exit {code})\n{out}"
        if re.search(r"not permitted|Permission Denied", out, re.IGNORECASE):
            failed.append("ptrace refused")
        elif "Failed to find python version" in out:
            failed.append("not Python")
    row.walls.append(wall)
    why = ", ".join(f"{failed.count(w)} {w}" for w in dict.fromkeys(failed))
    row.note = f"{len(procs)} process{'es' if len(procs) > 1 else ''}" + (
        f" ({why})" if why else ""
    )
    return text


def judge_text(row: Row, case: Case, pid: int, text: str) -> None:
    """What a stack dump names, read as a person would: the stuck function is there or not;
    no owner, no cause; a child's frames are there but not singled out as the hang."""
    hit = [f for f in case.functions if f in text]
    row.function = ", ".join(hit) if hit else "no"
    row.owners = "no (every thread listed)" if hit else "no"
    row.cause = "no"
    if case.child:
        kids = tree(pid)[1:]
        shown = any(f"=== pid {k} " in text and hit for k in kids)
        row.child = "frames shown, not singled out" if shown else "no"


def harness_rep(row: Row, case: Case, pid: int, args: argparse.Namespace, tmp: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp))
    folder.chmod(0o777)  # the /proc-only case writes as another user
    argv = [sys.executable, "-m", "harness", "attach", str(pid), "--report-dir", str(folder)]
    argv += ["--json", "--quiescent", str(args.quiescent), "--duration", str(args.duration)]
    prefix = [str(shutil.which("setpriv")), *NOBODY] if case.as_nobody else []
    took, out, code = run_timed(argv, prefix)
    row.walls.append(took)
    reports = list(folder.glob("*/report.json"))
    if not reports:
        row.note = f"exit {code}, no report: {out.strip().splitlines()[-1:]}"
        return
    report = json.loads(reports[0].read_text())
    v = report["verdict"]
    where = [m for e in v["evidence"] if (m := re.match(r"location (\S+) on pid (\d+)", e))]
    row.function = v["location"] or "no (no stacks)"
    causes = v.get("causes") or []
    row.cause = ", ".join(c["id"] for c in causes) or "no"
    tids = sorted({t for c in causes for e in c["evidence"] for t in re.findall(r"tid (\d+)", e)})
    tids = tids or sorted({t for c in causes for t in re.findall(r"tid (\d+)", c["sentence"])})
    row.owners = f"yes: tids {', '.join(tids)}" if tids else "no"
    if case.child:
        kids = tree(pid)[1:]
        row.child = (
            f"located in child {where[0].group(2)}"
            if where and int(where[0].group(2)) in kids
            else "no"
        )
    row.note = f"exit {code}, {v['kind']} ({v['mechanism']}), trigger {report['trigger']}"
    if any(n.startswith("/proc only") for n in report["notes"]):
        row.note += "; /proc only, one line says what allows stacks"


def measure(case: Case, args: argparse.Namespace, tmp: Path) -> list[Row]:
    rows = [Row(case.name, "harness attach")]
    pyspy, gdb = tool_path("py-spy"), tool_path("gdb")
    prefix = [str(shutil.which("setpriv")), *NOBODY] if case.as_nobody else []
    if pyspy:
        rows.append(Row(case.name, "py-spy dump --native"))
    if gdb:
        rows.append(Row(case.name, "gdb -batch thread apply all bt"))
    with started(case) as pid:
        for _ in range(args.reps):
            for row in rows:
                if row.tool == "harness attach":
                    harness_rep(row, case, pid, args, tmp)
                    continue
                if row.tool.startswith("py-spy"):
                    argv = [str(pyspy), "dump", "--native", "--pid", "{pid}"]
                else:
                    argv = [str(gdb), "-batch", "-ex", "thread apply all bt", "-p", "{pid}"]
                text = per_process(row, case, pid, argv, prefix)
                judge_text(row, case, pid, text)
    return rows


def table(rows: list[Row], reps: int) -> str:
    head = [
        f"| case | tool | median s (of {reps}) | stuck function | owners' tids | cause "
        "| the child | notes |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    body = [
        f"| {r.case} | {r.tool} | {r.median:.2f} | {r.function} | {r.owners} | {r.cause} "
        f"| {r.child} | {r.note} |"
        for r in rows
    ]
    return "\n".join(head + body)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=3, help="runs of each tool per case (default 3)")
    ap.add_argument(
        "--quiescent",
        type=float,
        default=1.0,
        help="harness attach --quiescent (default 1; the harness's own default is 5)",
    )
    ap.add_argument(
        "--duration",
        type=float,
        default=5.0,
        help="harness attach --duration (default 5): where ptrace is refused, /proc cannot "
        "tell quiescence and the window is the whole look",
    )
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--quick", "--smoke", action="store_true", help="one case, one rep (CI)")
    args = ap.parse_args()
    if args.quick:
        args.reps = 1
    with tempfile.TemporaryDirectory(prefix="bench-attach-") as name:
        tmp = Path(name)
        Path(name).chmod(0o755)  # the /proc-only case's harness runs as another user
        rows = [r for case in cases(tmp, args.quick) for r in measure(case, args, tmp)]
    load = os.getloadavg()[0]
    print(f"harness attach --quiescent {args.quiescent:g} vs py-spy and gdb on each process;")
    print(f"median of {args.reps}; {os.cpu_count()} CPUs, load {load:.1f}\n")
    print(table(rows, args.reps))
    if args.json:
        found = [asdict(r) | {"median_s": r.median} for r in rows]
        data = {"cpus": os.cpu_count(), "load": load, "reps": args.reps, "rows": found}
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
