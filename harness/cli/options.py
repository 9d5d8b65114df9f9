"""Option groups, each defined once, and the one translation of parsed arguments into the
pipeline's RunOptions: run, watch, compare, bisect and bisect-step all take the same limit,
trainer, sampling and report options from here."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from harness.cli.assignments import split_assignments
from harness.cli.hostopts import add_host_options, host_conditions
from harness.filenames import REPORT_JSON
from harness.outcome import USAGE
from harness.sampling import tools as stack_tools
from harness.vocab import AUTO, StackToolKind
from harness.watch.watchdog import DEFAULT_QUIESCENT_S

# Every command's parser is built on each start (`harness --help` too), so this module
# and the command modules import at top level only what a parser needs; the pipeline
# (pydantic configs, rich, the analysis) is imported inside the functions that use it.
if TYPE_CHECKING:
    from harness.execute.runner import SampleOptions
    from harness.hazards.expect import HazardExpect
    from harness.pipeline.options import RunOptions
    from harness.report.live import LiveProgress


class Parser(argparse.ArgumentParser):
    """argparse with our exit code for usage errors (argparse's 2 would read as "hang"),
    errors that name the subcommand, and unknown options refused by the subcommand that got
    them (bisect-step's must abort `git bisect run` with 255, not reach the top level)."""

    def __init__(self, *args: Any, usage_exit: int = USAGE, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usage_exit = usage_exit

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(self.usage_exit)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def _seconds(text: str, zero_ok: bool) -> float:
    from harness.config.fields import MAX_SECONDS  # pydantic: only once a value is parsed

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds {bound}, got {text}")
    if value > MAX_SECONDS:  # the same bound as a config's timeouts (they would overflow)
        raise argparse.ArgumentTypeError(f"at most {MAX_SECONDS:.0f} seconds (30 days), got {text}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds above zero (a bad limit is a usage error, exit 5)."""
    return _seconds(text, zero_ok=False)


def non_negative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (0 turns the limit off)."""
    return _seconds(text, zero_ok=True)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_env_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", help="env / scenario name: scenarios/ENV.toml (breakout, cartpole …)")


def add_source_options(p: argparse.ArgumentParser, variant: bool = True) -> None:
    p.add_argument(
        "--pin",
        help="upstream pin: a name in upstream_pin/ or a .toml path "
        "(default: pufferlib-5.0 with a checkout, else replica)",
    )
    if variant:
        p.add_argument(
            "--variant",
            default="stock",
            help="stock | omp-free | patch:FILE | ref:REF | env:K=V | alias, joined with + "
            "(default: stock)",
        )
    p.add_argument("--checkout", type=Path, help="the upstream's git checkout (git pins)")
    p.add_argument(
        "--allow-drift", action="store_true", help="go on even if the source drifted from the pin"
    )


def add_scenario_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", help="scenario name or .toml path (default: the env's)")
    p.add_argument("--steps", type=positive_int, help="total timesteps for the trainer")


def add_limit_options(p: argparse.ArgumentParser, per: str = "") -> None:
    p.add_argument("--timeout", type=positive_seconds, help=f"wall-clock limit{per} in seconds")
    p.add_argument(
        "--startup", type=positive_seconds, help="seconds allowed before the first progress"
    )
    p.add_argument("--stall", type=positive_seconds, help="seconds allowed without new progress")
    p.add_argument(
        "--quiescent",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="hang (deadlock) as soon as every thread has been blocked on the tree, with no "
        f"CPU and no output, for this long (default {DEFAULT_QUIESCENT_S:g}; 0: off; "
        "docs/quiescence.md)",
    )


def add_trainer_options(
    p: argparse.ArgumentParser, what: str = "trainer", args: bool = True
) -> None:
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="env_vars",
        help=f"environment variable for the {what} (repeatable)",
    )
    if args:
        p.add_argument(
            "--arg",
            action="append",
            default=[],
            dest="trainer_args",
            help="extra trainer argument, e.g. --arg=--vec.num-buffers=1 (repeatable)",
        )


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    add_stack_tool_options(p)
    p.add_argument("--no-sample", action="store_true", help="do not sample threads on suspicion")
    p.add_argument("--tee", action="store_true", help="show the command's output live (on stderr)")


def add_stack_tool_options(p: argparse.ArgumentParser) -> None:
    # the choices and what auto means come from the stack-tool registry (sampling/tools.py)
    p.add_argument(
        "--native",
        choices=stack_tools.choices(StackToolKind.NATIVE),
        default=AUTO,
        help=f"native stack tool (auto: {stack_tools.auto_text(StackToolKind.NATIVE)})",
    )
    p.add_argument(
        "--python-stacks",
        choices=stack_tools.choices(StackToolKind.PYTHON),
        default=AUTO,
        help="Python stack tool for Python processes of the tree "
        f"(auto: {stack_tools.auto_text(StackToolKind.PYTHON)} when present)",
    )


def add_report_options(p: argparse.ArgumentParser, default: Path | None = Path("reports")) -> None:
    where = f"default: {default}" if default else "default: <harness cache>/reports"
    p.add_argument(
        "--report-dir",
        type=Path,
        default=default,
        help=f"the report goes in a new folder under DIR ({where})",
    )


def add_progress_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress-every",
        type=positive_seconds,
        default=10.0,
        metavar="S",
        help="without a terminal (CI, a pipe): a progress line every S seconds and at each "
        "phase (default 10); on a terminal one line is updated in place",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress (stderr)")


def progress(args: argparse.Namespace, label: str) -> LiveProgress:
    from harness.report.live import LiveProgress

    if getattr(args, "quiet", False):
        return LiveProgress.off()
    return LiveProgress(label, every_s=getattr(args, "progress_every", 10.0))


def add_json_option(p: argparse.ArgumentParser, what: str = REPORT_JSON) -> None:
    p.add_argument(
        "--json", action="store_true", help=f"print {what} on stdout (the summary goes to stderr)"
    )


def add_watch_options(
    p: argparse.ArgumentParser, trainer_args: bool = True, per: str = "", expect: bool = True
) -> None:
    """Everything a watched run takes: limits, the command's env (and args), the host
    conditions, sampling, hazards (bisect has an --expect of its own)."""
    add_limit_options(p, per)
    add_trainer_options(p, "command" if not trainer_args else "trainer", args=trainer_args)
    add_host_options(p)
    add_sampling_options(p)
    add_hazard_options(p, expect)
    add_progress_options(p)


def hazard_expect(text: str) -> HazardExpect:
    """`--expect hazard:KIND[:LOCATION]` (a bad one is a usage error, exit 5)."""
    from harness.errors import HarnessError
    from harness.hazards.expect import parse_expect

    try:
        return parse_expect(text)
    except HarnessError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_hazard_options(p: argparse.ArgumentParser, expect: bool = True) -> None:
    p.add_argument(
        "--hazards",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record fork-after-threads/OpenMP and lock-order hazards, even in a run that "
        "passes (an LD_PRELOAD shim and a Python start-up hook; docs/hazards.md)",
    )
    if expect:
        p.add_argument(
            "--expect",
            type=hazard_expect,
            metavar="hazard:KIND[:LOCATION]",
            help="a passing run that shows this hazard fails as `hazard` (exit 9): the failure "
            "compare, sweep and repeat count; implies --hazards",
        )


def hazard_settings(
    args: argparse.Namespace, default: bool = False
) -> tuple[bool, HazardExpect | None]:
    """--hazards (or the command's default) and --expect hazard:…, which implies it."""
    from harness.hazards.expect import HazardExpect

    expect = getattr(args, "expect", None)
    expect = expect if isinstance(expect, HazardExpect) else None
    on = getattr(args, "hazards", None)
    if expect is not None and on is False:
        from harness.errors import HarnessError

        raise HarnessError("--expect hazard:… needs the hazards recorded: drop --no-hazards", USAGE)
    return (default if on is None else on) or expect is not None, expect


def sampling(args: argparse.Namespace) -> SampleOptions:
    from harness.execute.runner import SampleOptions

    return SampleOptions(enabled=not args.no_sample, native=args.native, python=args.python_stacks)


def trainer_env(args: argparse.Namespace) -> dict[str, str]:
    return split_assignments(args.env_vars, "--env")


def run_options(
    args: argparse.Namespace, variant: str | None = None, hazards_default: bool = False
) -> RunOptions:
    """The one place parsed arguments become RunOptions (run, compare, bisect, bisect-step)."""
    from harness.pipeline.options import RunOptions

    hazards, expect = hazard_settings(args, hazards_default)
    return RunOptions(
        env=args.env,
        pin=args.pin,
        scenario=args.scenario,
        variant=variant if variant is not None else args.variant,
        timeout_s=args.timeout,
        startup_s=args.startup,
        stall_s=args.stall,
        quiescent_s=args.quiescent,
        steps=args.steps,
        trainer_env=trainer_env(args),
        trainer_args=list(getattr(args, "trainer_args", [])),
        report_dir=args.report_dir,
        checkout=args.checkout,
        allow_drift=getattr(args, "allow_drift", False),
        sampling=sampling(args),
        tee=args.tee,
        harness_argv=list(sys.argv),
        progress=progress(args, f"harness {args.command} {args.env}"),
        conditions=host_conditions(args),
        hazards=hazards,
        expect_hazard=expect,
    )


def add_knob_options(p: argparse.ArgumentParser) -> None:
    """A sweep's knobs (`--set`, `--env`, `--variants`, `--host`): sweep and matrix (the
    dests `pipeline.sweep.parse_knobs` reads)."""
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=V1,V2",
        dest="sets",
        help="a trainer config knob and its values, passed as --section.key=value (repeatable)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        dest="env_knobs",
        help="an environment variable of the trainer and its values, e.g. "
        "OMP_WAIT_POLICY=active,passive (repeatable)",
    )
    p.add_argument(
        "--variants", help="comma list of variants, e.g. stock,omp-free (a build per variant)"
    )
    p.add_argument(
        "--host",
        dest="host_knob",
        metavar="PROFILE1,PROFILE2",
        help="host profiles (hosts/*.toml) as an axis, e.g. container-1cpu,noisy-2cpu",
    )
