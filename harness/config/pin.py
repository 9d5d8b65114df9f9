"""Pins: which upstream the harness drives, as data (upstream_pin/*.toml).

A pin names the source (a git commit, a PyPI sdist, or an in-repo path), the files whose
sha256 must match before a result is trusted, the build and run command templates, the
output parser, the tools it needs, the variants it defines, and the names of the upstream's
own functions that locate a hang (signatures). See docs/pin-schema.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.causes import Rule, rules_from_tables
from harness.config.causes import TriageKnob as TriageKnob
from harness.config.models import PIN_SCHEMA_VERSION as PIN_SCHEMA_VERSION
from harness.config.models import PinModel, TriageModel
from harness.config.models import project_root as project_root
from harness.config.schema_errors import (
    check_partial,
    is_config_file,
    is_file_name,
    read_toml,
    validate,
)
from harness.config.signatures import Pattern
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.vocab import RunCwd, SourceKind

UNVERIFIED = "UNVERIFIED"  # prefix of a value that has not been read from a real checkout yet


def pin_dir() -> Path:
    return project_root() / "upstream_pin"


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    url: str = ""
    branch: str = ""
    commit: str = ""
    path: str = ""  # kind "path": relative to the pin's folder
    package: str = ""
    version: str = ""
    sha256: str = ""
    filename: str = ""

    @property
    def commit_verified(self) -> bool:
        return bool(self.commit) and not self.commit.startswith(UNVERIFIED)


@dataclass(frozen=True)
class Hint:
    pattern: str
    hint: str


@dataclass(frozen=True)
class TriageSpec:
    """[triage]: what `harness triage` tries beyond the stock run; empty when the pin has no
    such table (docs/pin-schema.md)."""

    knobs: tuple[TriageKnob, ...] = ()  # swept as harness.pipeline.sweep knobs
    known_good: tuple[str, ...] = ()  # git refs History may start from
    hosts: tuple[str, ...] = ()  # hosts/*.toml profiles to try when it does not reproduce


def _triage_spec(model: TriageModel | None) -> TriageSpec:
    if model is None:
        return TriageSpec()
    return TriageSpec(
        knobs=tuple(k.knob() for k in model.knobs),
        known_good=tuple(model.known_good),
        hosts=tuple(model.hosts),
    )


@dataclass(frozen=True)
class Pin:
    name: str
    description: str
    file: Path
    source: Source
    envs: tuple[str, ...]
    parser: str
    build_command: str
    build_timeout_s: float
    build_env: dict[str, str]
    build_tools: tuple[str, ...]
    build_outputs: tuple[str, ...]
    build_hints: tuple[Hint, ...]
    build_per_env: bool  # False: one build serves every env (a Python package)
    build_env_passthrough: tuple[str, ...]  # environment variables the build reads
    run_command: str
    run_cwd: RunCwd  # tree: the build tree's entries in a folder of the run's own; report: empty
    run_writes: tuple[str, ...]  # what the trainer writes into the tree: fresh in each run
    run_env: dict[str, str]
    config_files: tuple[str, ...]  # relative to the build tree, "{env}" expanded
    files: dict[str, str]  # path relative to the source root → sha256 (or UNVERIFIED…)
    variants: dict[str, str]  # alias → variant spec
    # the variants that test the reported fix (aliases or specs): a cause's "test the fix"
    # and the default of `harness compare`; empty when the pin knows of no fix
    fixes: tuple[str, ...]
    signatures: tuple[Pattern, ...]
    # the pin's own cause rules ([[causes]], its own before those of the pins it extends),
    # parsed; checked against the detectors by harness.analysis.causes before a run
    causes: tuple[Rule, ...] = ()
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    # this pin's name, then the pins it extends, nearest first: a scenario's [pin.<name>]
    # settings and a check's `pins` apply to a pin through any name of its lineage
    lineage: tuple[str, ...] = ()
    triage: TriageSpec = field(default_factory=TriageSpec)

    @property
    def source_root(self) -> Path | None:
        """The in-repo source folder for kind "path" pins; None for external sources."""
        if self.source.kind is not SourceKind.PATH:
            return None
        return (self.file.parent / self.source.path).resolve()

    def render_build(self, env: str) -> str:
        return render(self.build_command, env=env)

    def render_run(self, env: str, steps: int, tree: Path | str = ".") -> str:
        """The run command; {tree} is the build tree (for runs outside it)."""
        return render(self.run_command, env=env, steps=steps, tree=tree)


_PLACEHOLDER = re.compile(r"\{(env|steps|tree)\}")  # what harness.config.fields checks


def render(template: str, **values: object) -> str:
    """Expand {env}, {steps} and {tree} only: shell's own ${VAR:-x} stays as written."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m[1], m[0])), template)


def parse_pin(data: Mapping[str, Any], file: Path, lineage: tuple[str, ...] = ()) -> Pin:
    """A pin's (merged) table as a Pin, validated against the schema (harness.config.models);
    one usage error naming `file` and the key path when it is not one."""
    if not isinstance(data, Mapping):
        raise HarnessError(f"{file.name}: a pin must be a table", USAGE)
    where = file.name
    # cause rules are checked by their own loader, whose errors name the cause's id
    causes = rules_from_tables(data.get("causes", []), f"{where} [[causes]]")
    model = validate(PinModel, {**data, "causes": []}, where)
    src, build, run = model.source, model.build, model.run
    return Pin(
        name=model.name,
        description=model.description,
        file=file,
        source=Source(
            kind=src.kind,
            url=src.url,
            branch=src.branch,
            commit=src.commit,
            path=src.path,
            package=src.package,
            version=src.version,
            sha256=src.sha256,
            filename=src.filename,
        ),
        envs=tuple(model.envs),
        parser=model.parser,
        build_command=build.command,
        build_timeout_s=float(build.timeout_s),
        build_env=dict(build.env),
        build_tools=tuple(build.tools),
        build_outputs=tuple(build.outputs),
        build_hints=tuple(Hint(h.pattern, h.hint) for h in build.hints),
        build_per_env=build.per_env,
        build_env_passthrough=tuple(build.env_passthrough),
        run_command=run.command,
        run_cwd=run.cwd,
        run_writes=tuple(run.writes),
        run_env=dict(run.env),
        config_files=tuple(run.config_files),
        files=dict(model.files),
        variants=dict(model.variants),
        fixes=tuple(model.fixes),
        signatures=tuple(s.pattern() for s in model.signatures),
        causes=causes,
        raw=dict(data),
        lineage=(model.name, *lineage),
        triage=_triage_spec(model.triage),
    )


def available_pins() -> list[str]:
    return sorted(p.stem for p in pin_dir().glob("*.toml"))


MAX_EXTENDS = 8  # a deeper chain is a mistake, and a loop must end
# [[signatures]] of a pin come before those of the pin it extends (they locate first)
_PREPENDED = ("signatures", "causes")
# a source, or the file hashes that describe one commit of it, are replaced whole
_REPLACED = ("source", "files")


def _pin_path(name_or_path: str, base: Path | None = None) -> Path:
    """A pin name (a file of upstream_pin/), or a path to a .toml file (relative to `base`,
    the folder of the pin that extends it, when given)."""
    if "\0" in name_or_path:
        raise HarnessError(f"pin {name_or_path!r}: a path with a NUL byte", USAGE)
    path = Path(name_or_path)
    if path.suffix != ".toml":
        if not is_file_name(name_or_path):
            raise HarnessError(
                f"pin {name_or_path!r}: a pin is a name of a file in {pin_dir()}, "
                "or a path ending in .toml",
                USAGE,
            )
        return pin_dir() / f"{name_or_path}.toml"
    if base is not None and not path.is_absolute():
        return (base / path).resolve()
    return path


def _read_pin(path: Path, name_or_path: str) -> dict[str, Any]:
    if not is_config_file(path):
        known = ", ".join(available_pins())
        raise HarnessError(f"unknown pin {name_or_path!r} (known: {known})", USAGE)
    return read_toml(path)


def _merge_tables(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_tables(out[key], value)
        else:
            out[key] = value
    return out


def merge_extended(
    parent: dict[str, Any], parent_file: Path, own: dict[str, Any]
) -> dict[str, Any]:
    """A pin's table over the one it extends: tables merge key by key, `source` and `files`
    are replaced whole, `[[signatures]]` (and `[[causes]]`) are the pin's own first, then the
    parent's; anything else the pin sets replaces the parent's."""
    base = dict(parent)
    src = base.get("source")
    if isinstance(src, dict) and src.get("kind") == SourceKind.PATH and "source" not in own:
        # a path source is relative to the pin that declared it, not to the one inheriting it
        base["source"] = {**src, "path": str((parent_file.parent / src.get("path", "")).resolve())}
    merged: dict[str, Any] = {k: v for k, v in base.items() if k not in ("name", "extends")}
    for key, value in own.items():
        if key == "extends":
            continue
        if key in _PREPENDED and isinstance(value, list):
            merged[key] = [*value, *base.get(key, [])]
        elif key in _REPLACED or not isinstance(value, dict):
            merged[key] = value
        else:
            merged[key] = _merge_tables(
                base.get(key, {}) if isinstance(base.get(key), dict) else {}, value
            )
    return merged


def _resolve(
    path: Path, name_or_path: str, chain: tuple[Path, ...]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The pin's data with everything it extends merged in, and the names of its ancestors."""
    data = _read_pin(path, name_or_path)
    parent_ref = data.get("extends")
    where = path.name
    if parent_ref is None:
        return data, ()
    if not isinstance(parent_ref, str) or not parent_ref:
        raise HarnessError(f"{where}: extends must be a pin name or a .toml path", USAGE)
    # each file of the chain on its own: types, ranges and unknown keys named in the file
    # that has them (its required keys may come from the pin it extends)
    rules_from_tables(data.get("causes", []), f"{where} [[causes]]")
    check_partial(PinModel, {**data, "causes": []}, where)
    parent_path = _pin_path(parent_ref, base=path.parent)
    if parent_path.resolve() in chain:
        names = " → ".join(p.name for p in (*chain, parent_path.resolve()))
        raise HarnessError(f"{where}: pins extend each other in a loop ({names})", USAGE)
    if len(chain) >= MAX_EXTENDS:
        raise HarnessError(f"{where}: more than {MAX_EXTENDS} pins extend each other", USAGE)
    parent, ancestors = _resolve(parent_path, parent_ref, (*chain, parent_path.resolve()))
    if "name" not in parent:
        raise HarnessError(f"{parent_path.name}: missing required key 'name'", USAGE)
    return merge_extended(parent, parent_path, data), (str(parent["name"]), *ancestors)


def load_pin(name_or_path: str) -> Pin:
    path = _pin_path(name_or_path)
    data, ancestors = _resolve(path, name_or_path, (path.resolve(),))
    return parse_pin(data, path, ancestors)


def check_env(pin: Pin, env: str) -> None:
    if env not in pin.envs:
        raise HarnessError(f"unknown env {env!r} for pin {pin.name} (known: {', '.join(pin.envs)})")


def _one_line(command: str) -> str:
    lines = [ln for ln in command.strip().splitlines() if ln.strip()]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... ({len(lines)} lines)"


def describe_triage(triage: TriageSpec) -> list[str]:
    """The [triage] table as `harness pin show` prints it."""
    if triage == TriageSpec():
        return ["  triage:   -"]
    knobs = [f"    knob        {k.text()}" for k in triage.knobs]
    return [
        "  triage:",
        *knobs,
        f"    known_good  {', '.join(triage.known_good) or '-'}",
        f"    hosts       {', '.join(triage.hosts) or '-'}",
    ]


def describe_pin(pin: Pin) -> str:
    s = pin.source
    where = {
        SourceKind.GIT: f"{s.url} branch {s.branch} commit {s.commit}",
        SourceKind.PYPI: f"PyPI {s.package}=={s.version} sha256 {s.sha256 or UNVERIFIED}",
        SourceKind.PATH: f"in-repo folder {pin.source_root}",
    }[s.kind]
    lines = [
        f"pin {pin.name}: {pin.description}",
        f"  file:     {pin.file}",
        f"  source:   {where}",
        f"  envs:     {', '.join(pin.envs)}",
        f"  build:    {_one_line(pin.build_command)}  (tools: {', '.join(pin.build_tools) or '-'})",
        f"  run:      {pin.run_command}  (parser: {pin.parser})",
        f"  variants: {', '.join(f'{k} = {v}' for k, v in pin.variants.items()) or '-'}",
        f"  fixes:    {', '.join(pin.fixes) or '-'}",
        f"  signatures: {', '.join(sig.name for sig in pin.signatures) or '-'}",
        *describe_triage(pin.triage),
        "  files:",
    ]
    lines += [f"    {rel}  {digest}" for rel, digest in sorted(pin.files.items())]
    if s.kind is SourceKind.GIT and not s.commit_verified:
        lines.append(
            f"  UNVERIFIED: commit {s.commit}; "
            f"run `harness pin update --pin {pin.name} --checkout PATH`"
        )
    return "\n".join(lines)
