"""`harness build ENV`: prepare and build an env's variant (cached), nothing run."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.cli import options
from harness.outcome import BUILD_FAILED
from harness.text import terminal_safe

NAME = "build"


def add_parser(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        NAME,
        help="prepare and build an env's variant (cached)",
        description="Verify the source, prepare the variant's tree and build it with the "
        "pin's build command; a build with the same inputs is a cache hit. Exits 0 when "
        "built, 4 when the build failed.",
    )
    options.add_env_argument(p)
    options.add_source_options(p)


def command(args: argparse.Namespace) -> int:
    from harness.config.defaults import default_pin
    from harness.config.pin import check_env, load_pin
    from harness.pipeline.stages import build_failed_verdict, verify_prepare_build

    pin = load_pin(args.pin or default_pin(args.checkout))
    check_env(pin, args.env)
    built = verify_prepare_build(pin, args.env, args.variant, args.checkout, args.allow_drift)
    res = built.result
    for note in res.notes:  # a damaged cache entry was rebuilt: say why
        print(f"harness: note: {terminal_safe(note)}", file=sys.stderr)
    state = "cache hit" if res.cache_hit else f"built in {res.duration_s:.1f}s"
    if res.ok:
        print(f"harness: {pin.name} {args.env} [{args.variant}] {state}: {res.tree}")
        print(f"harness: verification {built.verification.describe()}; log {res.log_path}")
        return 0
    # the compiler's first error line may carry colour codes
    print(f"harness: {terminal_safe(build_failed_verdict(res).summary)}", file=sys.stderr)
    print(f"harness: build log: {res.log_path}", file=sys.stderr)
    return BUILD_FAILED
