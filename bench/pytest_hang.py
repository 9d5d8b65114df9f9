"""A pytest session with hanging tests under three watchers, side by side:

- pytest-timeout with its default method (`signal`: SIGALRM raises in the main thread),
- pytest-timeout `--timeout-method=thread` (a timer thread dumps the Python stacks and ends
  the whole process with os._exit),
- `--hang-watch` (harness/pytest_plugin: a watcher outside pytest follows the tree; at
  quiescence it samples, classifies, fails the hung test and lets the session go on).

The session is tests/pytest_hang/ (the files of tests/test_pytest_plugin.py): a native
deadlock (ctypes into a C lock cycle), a Python deadlock (two threading.Locks), a test
waiting on a child that deadlocks, each between passing tests, and a file of passing tests.
For each watcher: the session's wall time (or the outer limit, when it never ended), each
hung test's time to failure (JUnit), whether the tests after it ran and were reported, and
what its failure says (Python frames, native frames, a cause). A Markdown table goes to
stdout (and --out FILE).

    .venv/bin/python bench/pytest_hang.py [--timeout 30] [--smoke] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "pytest_hang"
FILES = ["case_native.py", "case_pylocks.py", "case_child.py", "case_plain.py"]
HUNG = {
    "native (ctypes lock cycle)": "case_native.py::test_native_deadlock",
    "Python locks": "case_pylocks.py::test_python_deadlock",
    "stuck child": "case_child.py::test_stuck_child",
}
AFTER = [
    "case_native.py::test_native_after",
    "case_pylocks.py::test_pylocks_after",
    "case_child.py::test_child_after",
]


@dataclass
class Outcome:
    wall_s: float
    ended: bool  # the session ended by itself (not killed at the outer limit)
    junit: dict[str, tuple[str, float, str]]  # nodeid → (outcome, seconds, failure text)
    tests_total: int
    output: str  # the session's stdout and stderr


def _session(tmp: Path) -> tuple[Path, Path]:
    cases = tmp / "cases"
    shutil.copytree(CASES, cases, ignore=shutil.ignore_patterns("__pycache__"))
    (cases / "pytest.ini").write_text("[pytest]\npython_files = case_*.py\n")
    lib = cases / "liblock_cycle.so"
    cmd = ["gcc", "-shared", "-fPIC", "-O0", "-o", str(lib), str(cases / "lock_cycle.c")]
    subprocess.run([*cmd, "-lpthread"], check=True, timeout=60)
    return cases, lib


def _marked(marker: str) -> list[int]:
    needle = f"HANG_BENCH_MARK={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _junit(path: Path) -> dict[str, tuple[str, float, str]]:
    out: dict[str, tuple[str, float, str]] = {}
    if not path.exists():
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return out
    for case in root.iter("testcase"):
        nodeid = (case.get("classname") or "").replace(".", "/") + ".py::" + str(case.get("name"))
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        seconds = float(case.get("time") or 0)
        if bad is not None:
            out[nodeid] = ("failed", seconds, (bad.get("message") or "") + (bad.text or ""))
        else:
            out[nodeid] = ("passed", seconds, "")
    return out


def run(args: list[str], tmp: Path, limit_s: float, files: list[str]) -> Outcome:
    cases, lib = _session(tmp)
    junit = tmp / "junit.xml"
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(HANG_LIB=str(lib), HANG_BENCH_MARK=marker)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    cmd += [*args, *files]
    log = tmp / "session.log"
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=cases, env=env, stdout=out, stderr=out, start_new_session=True
        )
        try:
            proc.wait(timeout=limit_s)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
    wall = time.monotonic() - t0
    for pid in [proc.pid, *_marked(marker)]:  # the session and anything it left
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=cases,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    total = sum(1 for line in collected.stdout.splitlines() if "::" in line)
    output = log.read_text(errors="replace")
    return Outcome(wall, ended, _junit(junit), total, output)


def unreported(nodeid: str, o: Outcome) -> str:
    """A hung test with no JUnit entry: what the session's output says about it."""
    name = nodeid.split("::")[-1]
    if "+++ Timeout +++" in o.output and name in o.output:
        frames = o.output.count('File "')
        return f"Timeout: Python stacks only ({frames} frames), then the process exits"
    if not o.ended:
        return "nothing: the session hung until the outer limit"
    return "not run (the session had ended)"


def says(text: str) -> str:
    """What a failure message names: Python frames, native frames, a cause."""
    found = []
    if 'File "' in text or ".py:" in text:
        found.append("Python frames")
    if any(w in text for w in ("pthread_mutex_lock", "__lll_lock_wait", "futex", "native")):
        found.append("native")
    for cause in ("lock-cycle", "python-locks", "pipe-never-read", "dead-worker"):
        if cause in text:
            found.append(f"cause {cause}")
            break
    return ", ".join(found) or "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=30.0, help="pytest-timeout's per-test limit")
    ap.add_argument("--quiescent", type=float, default=5.0, help="--hang-quiescent")
    ap.add_argument("--smoke", action="store_true", help="only --hang-watch (the bench smoke test)")
    ap.add_argument("--out", type=Path, help="the Markdown table to this file too")
    ap.add_argument("--json", type=Path, help="the figures as JSON to this file")
    a = ap.parse_args()
    limit = 3 * a.timeout + 60
    timeout = ["-p", "no:hang_watch", f"--timeout={a.timeout:g}"]
    py_only = [f for f in FILES if f != "case_native.py"]
    watchers = [("--hang-watch", ["--hang-watch", f"--hang-quiescent={a.quiescent:g}"], FILES)]
    if not a.smoke:
        watchers = [
            (f"pytest-timeout ({method}){label}", [*timeout, f"--timeout-method={method}"], fs)
            for method in ("signal", "thread")
            for label, fs in (("", FILES), (", no native file", py_only))
        ] + [
            *watchers,
            (
                "--hang-watch -n 2",
                ["--hang-watch", f"--hang-quiescent={a.quiescent:g}", "-n", "2"],
                FILES,
            ),
        ]
    lines = [
        f"pytest session: {', '.join(FILES)}; pytest-timeout --timeout {a.timeout:g}; "
        f"--hang-quiescent {a.quiescent:g}; outer limit {limit:g} s",
        "",
        "| watcher | session | reported | later tests | "
        + " | ".join(f"{name}: time, says" for name in HUNG)
        + " |",
        "|---|---|---|---|" + "---|" * len(HUNG),
    ]
    figures: dict[str, dict[str, object]] = {}
    for name, args, files in watchers:
        with tempfile.TemporaryDirectory(prefix="bench-pytest-") as tmp:
            o = run(args, Path(tmp), limit, files)
        session = f"{o.wall_s:.1f} s" if o.ended else f"killed at {o.wall_s:.0f} s"
        later = [
            o.junit.get(t, ("not run", 0.0, ""))[0] for t in AFTER if t.split("::")[0] in files
        ]
        cells = []
        for nodeid in HUNG.values():
            got = o.junit.get(nodeid)
            if got is None:
                cells.append(unreported(nodeid, o) if nodeid.split("::")[0] in files else "-")
            else:
                cells.append(f"{got[0]} {got[1]:.1f} s, {says(got[2])}")
        lines.append(
            f"| {name} | {session} | {len(o.junit)}/{o.tests_total} | "
            f"{'ran' if all(x == 'passed' for x in later) else ', '.join(later)} | "
            + " | ".join(cells)
            + " |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
        figures[name] = {
            "session_s": round(o.wall_s, 2),
            "ended": o.ended,
            "reported": len(o.junit),
            "tests": o.tests_total,
            "hung": {
                k: list(o.junit.get(v, ("not reported", 0.0, ""))[:2]) for k, v in HUNG.items()
            },
        }
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
