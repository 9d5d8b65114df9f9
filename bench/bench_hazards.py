"""`--hazards` (docs/hazards.md): what it costs and what it shows, on real programs. A
benchmark, not a test: it prints, it does not assert.

    .venv/bin/python bench/bench_hazards.py overhead [--repeat 5] [--replica-steps N]
        [--p3-steps N] [--rounds N] [--skip-p3]
    .venv/bin/python bench/bench_hazards.py lockorder [--passes 10]
    .venv/bin/python bench/bench_hazards.py bisect [--commits 16] [--hang-at 11]
    .venv/bin/python bench/bench_hazards.py pufferlib3 [--steps 300000]

- overhead: SPS of the replica built to pass here (clang, LLVM's libomp, guarded reads) and
  of PufferLib 3.0.0 (its pin's Serial run) under `harness run` without and with
  `--hazards`, interleaved, median of --repeat each; and a mutex-heavy micro-benchmark
  (bench/mutex_heavy.c: nested pairs in two threads) bare, under the shim, and under
  Valgrind's Helgrind (fewer rounds: it is that slow), in nanoseconds per nested pair;
- lockorder: tests/programs/flaky_lockorder.c under `harness watch --hazards` until
  --passes runs passed (its hangs counted apart): in how many passing runs the inversion was
  reported with both call sites; tests/programs/lock_orders.c `ordered` (one order) as many
  times: in how many a hazard was reported;
- bisect: a generated replica history (tests/gitrepo.py) bisected with
  `--variant env:CC=clang --expect hazard:fork-after-openmp:env_start`: the commit named,
  its steps against ceil(log2 N) + 2;
- pufferlib3: one PufferLib 3.0.0 run with its Multiprocessing backend under --hazards.

Everything it writes goes under a temporary folder (build caches included), except that
PufferLib 3.0.0 is built once into the user's harness cache, as its tests do.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.gitrepo, tests.programs.build

REPLICA_VARIANT = "env:CC=clang+env:REPLICA_FIX=guards"
P3 = ("--pin", "pufferlib-3.0.0")
P3_SMALL = (
    "--arg=--env.num-envs=64",
    "--arg=--train.bptt-horizon=32",
    "--arg=--train.minibatch-size=4096",
)


def harness_json(args: list[str], env: dict[str, str], timeout: float = 900) -> dict[str, Any]:
    """`harness ARGS --json`: its report.json (the last JSON document on stdout)."""
    at = args.index("--") if "--" in args else len(args)  # before a watched command's own
    cmd = [sys.executable, "-m", "harness", *args[:at], "--json", "--quiet", *args[at:]]
    out = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env, cwd=ROOT)
    try:
        data: dict[str, Any] = json.loads(out.stdout)
    except ValueError:
        raise SystemExit(f"no report from {' '.join(args)}: {out.stderr.decode()[-400:]}") from None
    return data


def trained_sps(rep: dict[str, Any]) -> float | None:
    """Steps per second over the whole training: the trainer's end-of-run record where it
    writes one (exact steps over its own uptime: the replica), else the dashboard's mean
    (agent_steps over the uptime it shows, in whole seconds: PufferLib 3.0.0)."""
    progress = rep.get("progress") or {}
    final = progress.get("final_metrics") or {}
    steps, uptime = final.get("agent_steps"), final.get("uptime")
    if isinstance(steps, int | float) and isinstance(uptime, int | float) and uptime > 0:
        return float(steps) / float(uptime)
    sps = progress.get("measured_sps")
    return float(sps) if isinstance(sps, int | float) else None


def sps_pair(
    label: str, base: list[str], env: dict[str, str], repeat: int, work: Path
) -> dict[str, Any]:
    """SPS without and with --hazards, interleaved (the order alternates by round)."""
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(repeat):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for mode in order:
            flags = ["--hazards"] if mode == "on" else []
            rep = harness_json(
                [*base, *flags, "--report-dir", str(work / f"{label}-{mode}-{i}")], env
            )
            sps = trained_sps(rep)
            kind = (rep.get("verdict") or {}).get("kind")
            if sps is None:
                raise SystemExit(f"{label} {mode}: no SPS ({kind})")
            runs[mode].append(float(sps))
        print(f"  {label} round {i + 1}: off {runs['off'][-1]:,.0f}  on {runs['on'][-1]:,.0f} SPS")
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"off": off, "on": on, "cost_pct": 100 * (1 - on / off), "runs": runs}


def mutex_micro(rounds: int, repeat: int, work: Path) -> dict[str, Any]:
    from harness.hazards.shim import hazard_env, recorders

    binary = work / "mutex_heavy"
    subprocess.run(
        ["gcc", "-O2", "-pthread", "-o", str(binary), str(ROOT / "bench" / "mutex_heavy.c")],
        check=True,
        timeout=120,
    )
    rec = recorders(work / "cache")

    def ns(argv: list[str], env: dict[str, str] | None = None) -> float:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
        words = out.stdout.split()
        return float(words[words.index("ns_per_pair") + 1])

    bare, shimmed = [], []
    for i in range(repeat):
        folder = work / f"micro-{i}"
        folder.mkdir()
        env = {**os.environ, **hazard_env(rec, folder, os.environ)}
        bare.append(ns([str(binary), str(rounds)]))
        shimmed.append(ns([str(binary), str(rounds)], env))
    result: dict[str, Any] = {
        "bare_ns": statistics.median(bare),
        "shim_ns": statistics.median(shimmed),
    }
    valgrind = shutil.which("valgrind")
    if valgrind:
        small = max(rounds // 50, 1000)
        start = time.monotonic()
        out = subprocess.run(
            [valgrind, "--tool=helgrind", "-q", str(binary), str(small)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wall = time.monotonic() - start
        words = out.stdout.split()
        result["helgrind_ns"] = float(words[words.index("ns_per_pair") + 1]) if words else None
        result["helgrind_rounds"] = small
        result["helgrind_wall_s"] = wall
        result["helgrind_reports"] = out.stderr.count("Possible data race") + out.stderr.count(
            "lock order"
        )
    return result


def overhead(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    env = {**os.environ, "HARNESS_CACHE_DIR": str(work / "cache")}
    out: dict[str, Any] = {}
    replica = ["run", "breakout", "--variant", REPLICA_VARIANT, "--steps", str(args.replica_steps)]
    if not args.skip_replica:
        harness_json([*replica, "--report-dir", str(work / "warm")], env)  # the build, once
        out["replica"] = sps_pair("replica", replica, env, args.repeat, work)
    if not args.skip_p3:
        p3_env = dict(os.environ)  # the user's cache: PufferLib is built once (minutes)
        p3 = ["run", "breakout", *P3, *P3_SMALL, "--steps", str(args.p3_steps)]
        out["pufferlib3"] = sps_pair("pufferlib3", p3, p3_env, args.repeat, work)
    out["mutex"] = mutex_micro(args.rounds, args.repeat, work)
    print()
    print("| program | without | with --hazards | cost |")
    print("|---|---|---|---|")
    rows = [
        (f"{key} (SPS, median of {args.repeat})", f"{r['off']:,.0f}", f"{r['on']:,.0f}",
         f"{r['cost_pct']:+.1f}%")
        for key, r in out.items()
        if key in ("replica", "pufferlib3")
    ]  # fmt: skip
    m = out["mutex"]
    bare = m["bare_ns"]
    rows.append(("mutex_heavy (ns per nested pair)", f"{bare:.1f}", f"{m['shim_ns']:.1f}",
                 f"x{m['shim_ns'] / bare:.2f}"))  # fmt: skip
    if m.get("helgrind_ns"):
        label = f"mutex_heavy under Helgrind ({m['helgrind_rounds']} rounds)"
        rows.append(
            (label, f"{bare:.1f}", f"{m['helgrind_ns']:.1f}", f"x{m['helgrind_ns'] / bare:.0f}")
        )
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return out


def lockorder(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build", ROOT / "tests" / "programs" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    compile_c = build.compile_c

    env = {**os.environ, "HARNESS_CACHE_DIR": str(work / "cache")}
    flaky = str(compile_c("flaky_lockorder", work / "programs"))
    ordered = str(compile_c("lock_orders", work / "programs"))
    passes = reported = hangs = runs = 0
    while passes < args.passes and runs < 4 * args.passes:
        runs += 1
        rep = harness_json(
            ["watch", "--hazards", "--quiescent", "1", "--timeout", "30", "--report-dir",
             str(work / f"flaky-{runs}"), "--", flaky], env,
        )  # fmt: skip
        kind = rep["verdict"]["kind"]
        if kind != "pass":
            hangs += kind == "hang"
            continue
        passes += 1
        cycles = [h for h in rep["hazards"]["hazards"] if h["kind"] == "lock-order"]
        both = any(
            sum("flaky_lockorder.c:" in c for c in h["cycle"]) == 2 and len(h["cycle"]) == 2
            for h in cycles
        )
        reported += both
        if both and passes == 1:
            print("  e.g.", *cycles[0]["cycle"], sep="\n    ")
    same = 0
    for i in range(args.passes):
        rep = harness_json(
            [
                "watch",
                "--hazards",
                "--report-dir",
                str(work / f"ordered-{i}"),
                "--",
                ordered,
                "ordered",
            ],
            env,
        )
        same += bool(rep["hazards"]["hazards"])
    print(
        f"flaky_lockorder: {runs} runs, {passes} passed, {hangs} hung; inversion reported with "
        f"both call sites in {reported} of {passes} passing runs"
    )
    print(f"lock_orders ordered: a hazard reported in {same} of {args.passes} runs")
    return {
        "runs": runs,
        "passes": passes,
        "hangs": hangs,
        "reported": reported,
        "ordered_reported": same,
    }


def bisect_hazard(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ["HARNESS_CACHE_DIR"] = str(work / "cache")
    from harness import bisect as bis
    from harness.hazards.expect import parse_expect
    from harness.pipeline.options import RunOptions
    from tests.gitrepo import make_history, plan_with, write_scenario

    history = make_history(work / "history", plan_with(args.commits, {args.hang_at: "hang"}))
    write_scenario(history.scenario, startup_s=4, stall_s=4)
    opts = bis.BisectOptions(
        run=RunOptions(
            env="breakout",
            pin=str(history.pin),
            checkout=history.root,
            scenario=str(history.scenario),
            report_dir=work / "reports",
            variant="env:CC=clang",
            hazards=True,
            expect_hazard=parse_expect("hazard:fork-after-openmp:env_start"),
        ),
        good=history.commits[0],
        bad=history.commits[-1],
        expect="hazard",
    )
    start = time.monotonic()
    result = bis.bisect(opts)
    wall = time.monotonic() - start
    t = result.totals()
    named = result.first_bad.commit if result.first_bad else None
    bound = math.ceil(math.log2(args.commits)) + 2
    right = named is not None and named.sha == history.first_bad
    print(f"history: {args.commits} commits after the base, the pragma at commit {args.hang_at}")
    print(
        f"named: {named.short + ' ' + named.subject if named else result.message()} "
        f"({'the right one' if right else 'WRONG'}); steps {t['steps']} (bound {bound}), "
        f"runs {t['runs']}, wall {wall:.1f}s"
    )
    return {"right": right, "steps": t["steps"], "bound": bound, "runs": t["runs"], "wall_s": wall}


def pufferlib3(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    rep = harness_json(
        ["run", "breakout", *P3, *P3_SMALL, "--steps", str(args.steps),
         "--arg=--vec.backend=Multiprocessing", "--arg=--vec.num-workers=2", "--hazards",
         "--report-dir", str(work / "p3")],
        dict(os.environ),
    )  # fmt: skip
    hz = rep["hazards"]
    print(f"verdict {rep['verdict']['kind']}: {rep['verdict']['summary']}")
    print(f"hazards: {len(hz['hazards'])}; forks beside threads {hz['forks']}, "
          f"safe {hz['safe_forks']}; processes {hz['processes']}")  # fmt: skip
    for h in hz["hazards"]:
        print(f"  {h['kind']}: {h['summary']}")
    return {"verdict": rep["verdict"]["kind"], "hazards": hz}


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--repeat", type=int, default=5)
    o.add_argument("--replica-steps", type=int, default=4_194_304)
    o.add_argument("--p3-steps", type=int, default=1_000_000)
    o.add_argument("--rounds", type=int, default=2_000_000)
    o.add_argument("--skip-p3", action="store_true")
    o.add_argument("--skip-replica", action="store_true")
    lo = sub.add_parser("lockorder")
    lo.add_argument("--passes", type=int, default=10)
    b = sub.add_parser("bisect")
    b.add_argument("--commits", type=int, default=16)
    b.add_argument("--hang-at", type=int, default=11)
    p = sub.add_parser("pufferlib3")
    p.add_argument("--steps", type=int, default=300_000)
    for s in (o, lo, b, p):
        s.add_argument("--json", type=Path, help="also write the figures here")
        s.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hazards-"))
    try:
        run = {
            "overhead": overhead,
            "lockorder": lockorder,
            "bisect": bisect_hazard,
            "pufferlib3": pufferlib3,
        }
        figures = run[args.what](args, work)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2, default=str))
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
