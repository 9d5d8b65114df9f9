"""`--steps` in whole epochs: the trainer runs total // epoch_size epochs, so a count that is
not a whole number of epochs is refused before anything is built, with the nearest valid
values."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from harness import variants
from harness.analysis import checks as checksmod
from harness.config.pin import Pin
from harness.config.scenario import RunSettings, Scenario
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.options import RunOptions
from harness.source.git import locate_checkout
from harness.vocab import CheckKind, SourceKind, VariantKind


def epoch_before_build(
    opts: RunOptions, scenario: Scenario, pin: Pin, settings: RunSettings, steps: int
) -> int | None:
    """Steps per epoch for this run, from the pin's config files in the source as they are
    before the build and the run's --sec.key=value arguments; None when it cannot be known
    before the run (no `per_epoch` check applies, a git source at another commit or without
    a checkout, a variant that patches the config files or fetches a ref, a value missing)."""
    factors = [
        spec["per_epoch"]
        for spec in scenario.checks
        if spec.get("kind") == CheckKind.STEPS_REACHED
        and spec.get("per_epoch")
        and (spec.get("pins") is None or any(n in spec["pins"] for n in pin.lineage))
    ]
    if not factors or opts.commit is not None:
        return None
    env = settings.upstream_env
    config_files = [f.format(env=env) for f in settings.config_files or pin.config_files]
    root = _source_root(pin, opts.checkout)
    if root is None or _variant_touches(opts.variant, pin, config_files):
        return None
    argv = shlex.split(pin.render_run(settings.upstream_env, steps, shlex.quote(str(root))))
    argv += list(settings.args) + opts.trainer_args
    # the checks' own rules (config files + flags, the product of per_epoch values), so the
    # count refused here is the one steps_reached would round down
    config, _ = checksmod.config_for(None, root, env, argv, config_files)
    sizes = {checksmod.epoch_size(f, config) for f in factors}
    return sizes.pop() if len(sizes) == 1 and 0 not in sizes else None


def _source_root(pin: Pin, checkout: Path | None) -> Path | None:
    if pin.source_root is not None:
        return pin.source_root
    if pin.source.kind != SourceKind.GIT:
        return None  # a PyPI sdist: its config is known once exported
    try:
        return locate_checkout(pin, checkout)
    except HarnessError:
        return None


def _variant_touches(spec: str, pin: Pin, config_files: Sequence[str]) -> bool:
    """Whether the variant may change a config file: a ref (its diff is fetched later) or a
    patch whose diff names one."""
    for step in variants.parse_variant(spec, pin):
        if step.kind == VariantKind.REF:
            return True
        if step.kind == VariantKind.PATCH:
            # a pin alias's patch is read from the pin's folders only (HarnessError otherwise)
            path = variants.resolve_patch_path(step.arg, pin, step.alias)
            try:
                text = path.read_text(errors="replace")
            except OSError:
                return True
            if any(f"/{rel}" in text for rel in config_files):
                return True
    return False


def check_whole_epochs(
    opts: RunOptions, scenario: Scenario, pin: Pin, settings: RunSettings, steps: int
) -> None:
    """Refuse (a usage error, before anything is built) a --steps that is not a whole number
    of epochs: the trainer runs total // epoch_size epochs, so the rest would silently not
    run. A count below one epoch is let through: it trains no epoch at all, which
    `epochs >= 1` reports (the trap of the original report, on purpose)."""
    epoch = epoch_before_build(opts, scenario, pin, settings, steps)
    if not epoch or steps < epoch or steps % epoch == 0:
        return
    below = steps // epoch * epoch
    raise HarnessError(
        f"--steps {steps} is not a whole number of epochs (epoch = {epoch} steps with this "
        f"config): use {below} or {below + epoch}",
        USAGE,
    )
