"""Output at any rate: a program writing N MB/s for T s, bare vs under `harness watch`.

    .venv/bin/python bench/bench_flood.py [--rate 50] [--seconds 10] [--repeat 1]
        [--json PATH] [--smoke]

The writer (tests/programs/flood.py) writes deterministic binary blocks of 1 MiB (NUL bytes,
invalid UTF-8, CR, megabyte-long lines, no final newline) paced at the rate, and records its
own throughput and the sha256 of what it wrote. It runs once bare (stdout to /dev/null) and
once under `harness watch --timeout 120`. Prints the throughput of each and their ratio
(target: >= 90%), the harness process's peak RSS (VmHWM from /proc, sampled every 50 ms;
target: < 150 MB), whether output.log is byte-identical to what the writer wrote, and the
report's verdict and line count. With --repeat, bare and harness runs alternate and the
medians are compared. --smoke: 2 s at 10 MB/s.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "tests" / "programs" / "flood.py"


def writer_argv(args: argparse.Namespace, stats: Path) -> list[str]:
    return [
        sys.executable,
        str(WRITER),
        "--rate",
        str(args.rate),
        "--seconds",
        str(args.seconds),
        "--stats",
        str(stats),
        *(["--text"] if args.text else []),
    ]


def peak_rss_kib(pid: int, stop: threading.Event, out: list[int]) -> None:
    """Poll VmHWM (the peak resident set) of `pid` until `stop` or the process is gone."""
    while not stop.is_set():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out.append(int(line.split()[1]))
        except OSError:
            return
        stop.wait(0.05)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def bare(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    stats = tmp / "bare.json"
    with open(os.devnull, "wb") as sink:
        subprocess.run(writer_argv(args, stats), stdout=sink, check=True, timeout=600)
    return dict(json.loads(stats.read_text()))


def under_harness(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    stats = tmp / "harness.json"
    reports = tmp / "reports"
    argv = [sys.executable, "-m", "harness", "watch", "--timeout", "120"]
    argv += ["--report-dir", str(reports), "--json", "--", *writer_argv(args, stats)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stop, rss = threading.Event(), [0]
    sampler = threading.Thread(target=peak_rss_kib, args=(proc.pid, stop, rss), daemon=True)
    sampler.start()
    _, err = proc.communicate(timeout=600)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    written = json.loads(stats.read_text())
    run_dirs = [d for d in reports.iterdir() if d.is_dir()]
    log = run_dirs[0] / "output.log"
    report = json.loads((run_dirs[0] / "report.json").read_text())
    progress = report.get("progress", {})
    expected_lines = written["newlines"] + (0 if written["ends_with_newline"] else 1)
    identical = log.stat().st_size == written["bytes"] and sha256_file(log) == written["sha256"]
    return {
        **written,
        "exit_code": proc.returncode,
        "verdict": report.get("verdict", {}).get("kind"),
        "peak_rss_mb": max(rss) / 1024,
        "harness_wall_s": wall,
        "log_bytes": log.stat().st_size,
        "log_identical": identical,
        "output_lines": progress.get("output_lines"),
        "expected_lines": expected_lines,
        "frames": progress.get("frames"),
        "stderr_tail": err.decode(errors="replace")[-400:] if proc.returncode else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rate", type=float, default=50.0, help="MB/s (1 MB = 1e6 bytes)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds, bare and harness alternated")
    ap.add_argument("--text", action="store_true", help="printable lines (~85 bytes) instead")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="2 s at 10 MB/s (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.rate, args.seconds = 10.0, 2.0
    rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    kind = "text lines" if args.text else "binary"
    print(f"writer: {kind}, {args.rate:g} MB/s for {args.seconds:g} s, {args.repeat} round(s)")
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-flood-") as t:
            b = bare(args, Path(t))
            h = under_harness(args, Path(t))
        rounds.append((b, h))
        print(
            f"round {i + 1}: bare {b['MB_per_s']:.1f} MB/s ({b['bytes'] / 1e6:.0f} MB), "
            f"harness {h['MB_per_s']:.1f} MB/s ({h['bytes'] / 1e6:.0f} MB), "
            f"peak RSS {h['peak_rss_mb']:.0f} MB, log identical {h['log_identical']}, "
            f"verdict {h['verdict']}, lines {h['output_lines']}/{h['expected_lines']}, "
            f"harness wall {h['harness_wall_s']:.1f} s"
        )
        if h["stderr_tail"]:
            print(h["stderr_tail"])
    bare_rate = statistics.median(b["MB_per_s"] for b, _ in rounds)
    harness_rate = statistics.median(h["MB_per_s"] for _, h in rounds)
    ratio = harness_rate / bare_rate if bare_rate else 0.0
    peak = max(h["peak_rss_mb"] for _, h in rounds)
    identical = all(h["log_identical"] for _, h in rounds)
    lines_ok = all(h["output_lines"] == h["expected_lines"] for _, h in rounds)
    verdicts = sorted({str(h["verdict"]) for _, h in rounds})
    print(
        f"median: bare {bare_rate:.1f} MB/s, under the harness {harness_rate:.1f} MB/s: "
        f"ratio {100 * ratio:.1f}% (target >= 90%)"
    )
    print(f"harness peak RSS {peak:.0f} MB (target < 150 MB)")
    print(
        f"output.log byte-identical: {identical}; line count exact: {lines_ok}; "
        f"verdicts: {', '.join(verdicts)}"
    )
    if args.json is not None:
        result = {
            "rate_MB_per_s": args.rate,
            "text": args.text,
            "seconds": args.seconds,
            "bare_MB_per_s": bare_rate,
            "harness_MB_per_s": harness_rate,
            "throughput_ratio": ratio,
            "peak_rss_mb": peak,
            "log_identical": identical,
            "lines_exact": lines_ok,
            "verdicts": verdicts,
            "rounds": [{"bare": b, "harness": h} for b, h in rounds],
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
