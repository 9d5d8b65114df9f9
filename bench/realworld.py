"""The real-world hang corpus (tests/realworld/, issue 18) under three tools, side by side:

- `harness watch` with its defaults (quiescence 5 s, stall 60 s) and a wall limit: launch →
  verdict, and what it names (verdict, trigger, location, cause)
- plain `timeout T` around the same command, started at the same moment: it ends at T
  with exit 124 and says nothing
- `py-spy dump` (with --subprocesses) of that plain run's root, taken the moment the harness
  gave its verdict: the innermost frame of the main thread of each process it shows

Then the false-verdict rate: each healthy look-alike N times under `harness watch`, the
count of runs that got a hang verdict. A Markdown table goes to stdout (and --out FILE).

    .venv/bin/python bench/realworld.py [--baseline-timeout 60] [--repeat-healthy 5]
    .venv/bin/python bench/realworld.py --cases pool-sigkill,ok-pool-slow-tasks --repeat-healthy 1
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realworld.corpus import HERE, Case, load_cases  # noqa: E402

WALL_S = 90  # the harness's wall limit, as in tests/test_realworld.py
HARNESS_EXTRA: list[str] = []  # --load K: the harness's own noisy neighbour on every run


@dataclass
class HarnessRow:
    seconds: float
    verdict: str  # kind (mechanism)
    trigger: str
    location: str
    cause: str


@dataclass
class BareRow:
    seconds: float
    exit_code: int | None
    py_spy: str  # the innermost frame of each process's main thread at the verdict moment


def harness_run(case: Case, tmp: Path, started: float) -> tuple[HarnessRow, float]:
    cmd = [sys.executable, "-m", "harness", "watch", "--timeout", str(WALL_S), "--cwd", str(HERE)]
    cmd += HARNESS_EXTRA
    cmd += ["--report-dir", str(tmp), "--json", "--quiet", "--", *case.command()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=WALL_S + 120, check=False)
    done = time.monotonic() - started
    try:
        r: dict[str, Any] = json.loads(out.stdout)
    except ValueError:
        return HarnessRow(done, f"no report (exit {out.returncode})", "", "", ""), done
    v = r["verdict"]
    causes = [c["id"] for c in v.get("causes") or []]
    run_s = (r.get("timings") or {}).get("run_s") or done
    kind = v["kind"] + (f" ({v['mechanism']})" if v.get("mechanism") else "")
    row = HarnessRow(run_s, kind, r.get("trigger") or "", v.get("location") or "", ",".join(causes))
    return row, done


def innermost_frames(dump: str) -> str:
    """py-spy's dump, one line per process: its main thread's innermost frame (the first
    frame line after a `Thread ... (idle|active)` header naming MainThread)."""
    names: list[str] = []
    lines = dump.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Thread") and "MainThread" in line:
            for nxt in lines[i + 1 : i + 3]:
                frame = nxt.strip()
                if frame and not frame.startswith("Thread"):
                    names.append(re.sub(r"\s+", " ", frame))
                    break
    return "; ".join(names) if names else "(no Python main thread shown)"


def py_spy_dump(pid: int) -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    try:
        out = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--subprocesses"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"py-spy failed: {exc}"
    return innermost_frames(out.stdout) if out.returncode == 0 else f"py-spy: {out.stderr[-120:]}"


def side_by_side(case: Case, limit: float, tmp: Path) -> tuple[HarnessRow, BareRow]:
    """The harness and a plain run of the same command, started together. py-spy dumps the
    plain run the moment the harness returns; the plain run is then held to `limit` (what
    `timeout limit` does: exit 124 if it still runs). When the harness answers after
    `limit`, the plain run is kept alive past it for the dump, and was seen running at
    `limit`: `timeout limit` would have ended it there with 124."""
    started = time.monotonic()
    bare = subprocess.Popen(
        ["timeout", str(max(limit, WALL_S + 60)), *case.command()],
        cwd=HERE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        row, _ = harness_run(case, tmp, started)
        spy = "(the plain run had ended)"
        with contextlib.suppress(OSError, ValueError):
            children = Path(f"/proc/{bare.pid}/task/{bare.pid}/children").read_text().split()
            if bare.poll() is None and children:
                spy = py_spy_dump(int(children[0]))
        with contextlib.suppress(subprocess.TimeoutExpired):
            bare.wait(timeout=max(0.0, started + limit - time.monotonic()))
        code, seconds = bare.poll(), time.monotonic() - started
        if code is None:  # still running at `limit`: plain `timeout limit` ends it so
            code, seconds = 124, limit
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bare.pid, signal.SIGKILL)
        bare.wait()
    return row, BareRow(seconds, code, spy)


def healthy_rate(case: Case, repeat: int, tmp: Path) -> tuple[int, int, list[str]]:
    hangs, notes = 0, []
    for i in range(repeat):
        row, _ = harness_run(case, tmp / f"{case.id}-{i}", time.monotonic())
        if row.verdict.startswith("hang") or not row.verdict.startswith("pass"):
            hangs += row.verdict.startswith("hang")
            notes.append(f"{row.verdict} by {row.trigger} in {row.location}")
    return hangs, repeat, notes


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def available(case: Case) -> str:
    """Why the case cannot run here, or ""."""
    for module in case.modules:
        if importlib.util.find_spec(module) is None:
            return f"module {module} missing"
    for word in case.command():
        if word.endswith("mpiexec") and not Path(word).exists() and not shutil.which(word):
            return "mpiexec missing"
    return ""


def main() -> None:
    global WALL_S
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--baseline-timeout", type=float, default=60.0, help="T of plain `timeout T`")
    ap.add_argument("--repeat-healthy", type=int, default=5, help="runs of each look-alike")
    ap.add_argument("--cases", help="comma-separated case ids (default: all)")
    ap.add_argument("--out", type=Path, help="write the Markdown table here too")
    ap.add_argument("--load", type=int, default=0, help="harness watch --load K on every run")
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside the whole bench")
    ap.add_argument(
        "--timeout",
        type=float,
        default=WALL_S,
        help=f"the harness's wall limit (default {WALL_S}; 600 is harness watch's own)",
    )
    args = ap.parse_args()
    WALL_S = int(args.timeout)
    if args.load:
        HARNESS_EXTRA[:] = ["--load", str(args.load)]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        _bench(args)
    finally:
        for p in busy:
            p.kill()
            p.wait(timeout=5)


def _bench(args: argparse.Namespace) -> None:
    cases = load_cases()
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.id in wanted]
    lines = [
        f"Hangs: `harness watch --timeout {WALL_S}` (defaults otherwise) beside plain "
        f"`timeout {args.baseline_timeout:g}` started at the same moment, and `py-spy dump "
        "--subprocesses` of that plain run taken when the harness gave its verdict.",
        "",
        "| case | harness: verdict | trigger | time to verdict | location | cause "
        "| expected cause | plain timeout | py-spy at that moment (main thread, per process) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    healthy_lines = [
        "",
        f"Healthy look-alikes: runs under `harness watch --timeout {WALL_S}` called a hang.",
        "",
        "| case | hang verdicts / runs | other outcomes |",
        "|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for case in cases:
            missing = available(case)
            if missing:
                lines.append(f"| {case.id} | not run: {missing} |||||||")
                continue
            if case.expect is None:
                hangs, runs, notes = healthy_rate(case, args.repeat_healthy, tmp)
                healthy_lines.append(f"| {case.id} | {hangs}/{runs} | {cell('; '.join(notes))} |")
                print(healthy_lines[-1], file=sys.stderr, flush=True)
                continue
            row, bare = side_by_side(case, args.baseline_timeout, tmp / case.id)
            said = f"exit {bare.exit_code} at {bare.seconds:.0f} s, nothing else"
            lines.append(
                f"| {case.id} | {cell(row.verdict)} | {cell(row.trigger)} | {row.seconds:.1f} s "
                f"| {cell(row.location)} | {cell(row.cause)} | {case.expect.cause} "
                f"| {said} | {cell(bare.py_spy)} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    table = "\n".join(lines + healthy_lines) + "\n"
    print(table)
    if args.out:
        args.out.write_text(table)


if __name__ == "__main__":
    main()
