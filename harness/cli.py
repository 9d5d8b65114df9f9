"""Command line: parse arguments, call the pipeline, print the summary, return the exit code.

Exit codes (README "Exit codes"): 0 pass, 1 check failed, 2 hang, 3 crash or error exit,
4 build failed, 5 usage/config error, 6 wall timeout while progressing, 70 internal error,
125 bisect skip, 128+N interrupted by signal N (130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from harness import __version__, pipeline
from harness.errors import BUILD_FAILED, USAGE, HarnessError, Interrupted
from harness.execute import runner
from harness.execute.watchdog import add_limit_options, positive_seconds

INTERNAL_ERROR = 70


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors with our exit code instead of 2 (2 means hang)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"harness: error: {message}", file=sys.stderr)
        sys.exit(USAGE)


def _add_watch_options(p: argparse.ArgumentParser, trainer_args: bool = True) -> None:
    add_limit_options(p)
    runner.add_trainer_options(p, "command", args=trainer_args)
    p.add_argument(
        "--report-dir",
        type=Path,
        default=Path("reports"),
        help="the report goes in a new folder under DIR (default: reports)",
    )
    p.add_argument("--json", action="store_true", help="print report.json on stdout")
    p.add_argument("--tee", action="store_true", help="show the command's output live (stderr)")
    p.add_argument(
        "--native",
        choices=["auto", "gdb", "eu-stack", "none"],
        default="auto",
        help="native stack tool (auto: gdb, else eu-stack)",
    )
    p.add_argument("--python-stacks", choices=["auto", "py-spy", "none"], default="auto")
    p.add_argument("--no-sample", action="store_true", help="do not sample threads on suspicion")


def _add_source_options(p: argparse.ArgumentParser, variant: bool = True) -> None:
    p.add_argument(
        "--pin", help="upstream pin (default: pufferlib-5.0 with a checkout, else replica)"
    )
    if variant:
        p.add_argument(
            "--variant",
            default="stock",
            help="stock | omp-free | patch:FILE | ref:REF | env:K=V | alias, joined with +",
        )
    p.add_argument("--checkout", type=Path, help="upstream checkout (git pins)")
    p.add_argument(
        "--allow-drift", action="store_true", help="go on even if the source drifted from the pin"
    )


def _sampling(args: argparse.Namespace) -> runner.SampleOptions:
    return runner.SampleOptions(
        enabled=not args.no_sample, native=args.native, python=args.python_stacks
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="build and run an env under the watchdog")
    run.add_argument("env", help="env / scenario name (scenarios/<env>.toml)")
    run.add_argument("--scenario", help="scenario name or path (default: the env's)")
    run.add_argument("--steps", type=int, help="total timesteps for the trainer")
    _add_source_options(run)
    _add_watch_options(run)

    build = sub.add_parser("build", help="prepare and build an env's variant (cached)")
    build.add_argument("env")
    _add_source_options(build)

    compare = sub.add_parser("compare", help="run one scenario for several variants, side by side")
    compare.add_argument("env")
    compare.add_argument(
        "--variants",
        default="stock,fixed",
        help="comma list; the first is the baseline expected to fail (default: stock,fixed)",
    )
    compare.add_argument("--scenario")
    compare.add_argument("--steps", type=int)
    _add_source_options(compare, variant=False)
    _add_watch_options(compare)

    check = sub.add_parser("check", help="re-run a scenario's checks on a saved report or log")
    check.add_argument(
        "target", type=Path, help="a report folder, its report.json, or an output log"
    )
    check.add_argument("--scenario", help="scenario (default: the report's env)")
    check.add_argument("--pin", help="pin whose parser and checks apply (default: the report's)")
    check.add_argument("--parser", help="output parser (default: the pin's)")
    check.add_argument("--steps", type=int, help="requested steps (default: the report's)")
    check.add_argument("--json", action="store_true")

    probe = sub.add_parser("probe", help="step an env header with random actions: reward bounds")
    probe.add_argument("env")
    probe.add_argument("--steps", type=int, default=20000, help="steps per env (default 20000)")
    probe.add_argument("--envs", type=int, default=64, help="number of envs (default 64)")
    probe.add_argument("--seed", type=int, default=1)
    probe.add_argument("--json", action="store_true")
    _add_source_options(probe)

    doctor = sub.add_parser(
        "doctor", help="probe this platform: tools, OpenMP (after fork), ptrace, NVML, CUDA"
    )
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--timeout", type=positive_seconds, default=10.0, help="seconds per probe")

    pin = sub.add_parser("pin", help="show, verify, update or fetch an upstream pin")
    pin.add_argument("action", choices=["show", "verify", "update", "fetch"])
    pin.add_argument(
        "--pin", default=None, help="pin name (default: replica, or pufferlib-5.0 with a checkout)"
    )
    pin.add_argument("--checkout", type=Path, help="upstream checkout (git pins)")
    pin.add_argument("--dest", type=Path, help="fetch: where to clone (default: the harness cache)")
    pin.add_argument("--json", action="store_true")

    from harness import bisect

    bisect.add_parsers(sub)

    watch = sub.add_parser("watch", help="watch any command: harness watch [options] -- CMD ...")
    watch.add_argument("--parser", default="lines", help="progress parser: lines, puffer5, puffer3")
    watch.add_argument("--cwd", type=Path, default=Path("."))
    _add_watch_options(watch, trainer_args=False)
    watch.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    return parser


def _finish(report_and_code: tuple[object, int], as_json: bool) -> int:
    from harness.report import Report, print_summary

    report, code = report_and_code
    assert isinstance(report, Report)
    if as_json:  # the machine-readable part first: nothing below can lose it
        print(json.dumps(report.to_json(), indent=2), flush=True)
    print_summary(report, sys.stderr if as_json else sys.stdout)
    return code


def _run_options(args: argparse.Namespace, variant: str) -> pipeline.RunOptions:
    return pipeline.RunOptions(
        env=args.env,
        pin=args.pin,
        scenario=args.scenario,
        variant=variant,
        timeout_s=args.timeout,
        startup_s=args.startup,
        stall_s=args.stall,
        steps=args.steps,
        trainer_env=pipeline.parse_trainer_env(args.env_vars),
        trainer_args=getattr(args, "trainer_args", []),
        report_dir=args.report_dir,
        checkout=args.checkout,
        allow_drift=args.allow_drift,
        sampling=_sampling(args),
        tee=args.tee,
        harness_argv=sys.argv,
    )


def cmd_run(args: argparse.Namespace) -> int:
    return _finish(pipeline.run_env(_run_options(args, args.variant)), args.json)


def cmd_build(args: argparse.Namespace) -> int:
    from harness.config.pin import check_env, load_pin

    pin = load_pin(args.pin or pipeline.default_pin(args.checkout))
    check_env(pin, args.env)
    built = pipeline.verify_prepare_build(
        pin, args.env, args.variant, args.checkout, args.allow_drift
    )
    res = built.result
    state = "cache hit" if res.cache_hit else f"built in {res.duration_s:.1f}s"
    if res.ok:
        print(f"harness: {pin.name} {args.env} [{args.variant}] {state}: {res.tree}")
        print(f"harness: verification {built.verification.describe()}; log {res.log_path}")
        return 0
    print(f"harness: {pipeline.build_failed_verdict(res).summary}", file=sys.stderr)
    print(f"harness: build log: {res.log_path}", file=sys.stderr)
    return BUILD_FAILED


def _dash(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.report import atomic_write, new_run_id

    specs = [v.strip() for v in args.variants.split(",") if v.strip()]
    if len(specs) < 2:
        raise HarnessError("--variants needs at least two variants: a baseline and a fix", USAGE)
    opts = _run_options(args, specs[0])
    rows, confirmed, why = pipeline.compare_variants(opts, specs)
    out = args.report_dir / new_run_id(f"compare-{args.env}")
    data = {
        "schema_version": 1,
        "env": args.env,
        "variants": [vars(r) for r in rows],
        "confirmed": confirmed,
        "summary": why,
    }
    atomic_write(out / "compare.json", json.dumps(data, indent=2) + "\n")
    table = [
        "| variant | verdict | location | epochs | SPS | failed checks |",
        "|---|---|---|---|---|---|",
    ]
    table += [
        f"| {r.variant} | {r.kind} | {r.location or '-'} | {_dash(r.epochs)} "
        f"| {_dash(r.sps)} | {', '.join(r.checks_failed) or '-'} |"
        for r in rows
    ]
    atomic_write(
        out / "compare.md", "\n".join([f"# compare {args.env}", "", why, "", *table]) + "\n"
    )
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(table))
        print(why)
        print(f"report: {out}")
    if any(r.exit_code >= 128 for r in rows):
        return rows[-1].exit_code
    return 0 if confirmed else 1


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes, 1 when one fails."""
    opts = pipeline.CheckOptions(args.target, args.scenario, args.pin, args.parser, args.steps)
    results, source = pipeline.check_saved(opts)
    failed = [r for r in results if r.status == "fail"]
    if args.json:
        print(json.dumps({"source": source, "checks": [vars(r) for r in results]}, indent=2))
    else:
        print(f"harness check: {source}")
        for r in results:
            mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[r.status]
            tail = f"  ({r.message})" if r.message else ""
            print(f"  {mark} {r.name}: observed {r.observed}, bound {r.bound}{tail}")
        print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    return 1 if failed else 0


def cmd_probe(args: argparse.Namespace) -> int:
    """Exit 0 when the probe's rewards are within the scenario's bounds, 1 when not."""
    res = pipeline.probe_env(
        args.env, args.pin, args.variant, args.checkout, args.steps, args.envs, args.seed
    )
    if args.json:
        print(json.dumps({"probe": res.data, "checks": [vars(c) for c in res.checks]}, indent=2))
    else:
        d = res.data
        print(
            f"harness probe {res.env}: {d['num_envs']} envs x {d['steps']} steps "
            f"= {d['samples']} env steps, "
            f"{d['episodes']:g} episodes, terminal rate {d['terminal_rate']:.4f}"
        )
        print(
            f"  raw reward     [{d['raw_min']:g}, {d['raw_max']:g}] "
            f"(declared [{d['declared_min']:g}, {d['declared_max']:g}], "
            f"{d['above_one']} steps with |r| > 1)"
        )
        print(f"  clamped reward [{d['clamped_min']:g}, {d['clamped_max']:g}]")
        print("  log means      " + ", ".join(f"{k} {v:.4g}" for k, v in d["log"].items()))
        for c in res.checks:
            mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[c.status]
            print(
                f"  {mark} {c.name}: {c.observed} in {c.bound}"
                + (f" ({c.message})" if c.message else "")
            )
    return 0 if res.ok else 1


def cmd_pin(args: argparse.Namespace) -> int:
    """pin show | verify | update | fetch. verify exits 0 verified, 1 drift, 2 unverified."""
    from harness.config import pin as pinmod

    pin = pinmod.load_pin(args.pin or pipeline.default_pin(args.checkout))
    if args.action == "show":
        print(pinmod.describe_pin(pin))
        return 0
    if args.action == "fetch":
        from harness import upstream

        print(f"harness: {pin.name} checked out at {upstream.fetch_checkout(pin, args.dest)}")
        return 0
    if args.action == "update":
        return _pin_update(pin, args.checkout)
    verification, _root = pipeline.verify_source(pin, args.checkout)
    if args.json:
        from harness.report import _plain

        print(json.dumps(_plain(verification), indent=2))
    else:
        print(pinmod.describe_verification(pin, verification))
    return {"verified": 0, "drift": 1}.get(verification.status, 2)


def _pin_update(pin: object, checkout: Path | None) -> int:
    from harness import upstream
    from harness.config.pin import Pin

    assert isinstance(pin, Pin)
    if pin.source.kind == "path":
        root, commit = pin.source_root, None
    elif pin.source.kind == "git":
        root = upstream.locate_checkout(pin, checkout)
        upstream.open_repo(root)
        commit = upstream.head_commit(root)
        if not upstream.commit_matches(pin.source.commit, commit):
            raise HarnessError(
                f"{root} is at {commit[:12]}, not the pinned {pin.source.commit}: check out the "
                "pinned commit first (or edit the pin's commit on purpose)",
                USAGE,
            )
        dirty = upstream.dirty_paths(root)
        if dirty:
            raise HarnessError(
                f"{root} has uncommitted changes ({', '.join(dirty[:5])}): refusing to hash them",
                USAGE,
            )
    else:
        raise HarnessError(
            f"pin update is for git and path pins; {pin.name} is {pin.source.kind}", USAGE
        )
    assert root is not None
    changes = upstream.update_pin_file(pin, root, commit)
    print("\n".join(changes) if changes else "harness: pin already up to date")
    print(f"harness: wrote {pin.file}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    opts = pipeline.WatchOptions(
        argv=cmd,
        timeout_s=args.timeout or 600.0,
        startup_s=args.startup or 60.0,
        stall_s=args.stall or 60.0,
        parser=args.parser,
        cwd=args.cwd,
        trainer_env=pipeline.parse_trainer_env(args.env_vars),
        report_dir=args.report_dir,
        sampling=_sampling(args),
        tee=args.tee,
        harness_argv=sys.argv,
    )
    return _finish(pipeline.watch_command(opts), args.json)


def cmd_doctor(args: argparse.Namespace) -> int:
    from harness import doctor

    return doctor.main(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "watch": cmd_watch,
    "build": cmd_build,
    "compare": cmd_compare,
    "pin": cmd_pin,
    "check": cmd_check,
    "probe": cmd_probe,
    "doctor": cmd_doctor,
}


def _install_signal_handlers() -> None:
    """First SIGINT/SIGTERM/SIGHUP raises Interrupted in the main thread (the runner then
    kills the trainer's tree and the partial report is written); later ones are ignored
    so that cleanup is not cut short."""
    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _bisect_commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    from harness import bisect

    return dict(bisect.COMMANDS)


COMMANDS.update(_bisect_commands())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _install_signal_handlers()
    try:
        return COMMANDS[args.command](args)
    except HarnessError as exc:
        print(f"harness: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except Interrupted as exc:
        print(f"harness: interrupted by signal {exc.signum}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:  # `harness ... | head`: the reader left; nothing to report
        return 141
    except Exception as exc:  # a bug in the harness: one line, the traceback in a file
        path = Path("reports") / "harness-internal-error.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(traceback.format_exc())
            where = f" (traceback in {path})"
        except OSError:
            where = ""
        print(f"harness: internal error: {exc!r}{where}", file=sys.stderr)
        return INTERNAL_ERROR
