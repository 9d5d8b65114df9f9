"""Pins: which upstream the harness drives, as data (upstream_pin/*.toml).

A pin names the source (a git commit, a PyPI sdist, or an in-repo path), the files whose
sha256 must match before a result is trusted, the build and run command templates, the
output parser, the tools it needs, the variants it defines, and the names of the upstream's
own functions that locate a hang (signatures). See docs/pin-schema.md.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import vocab
from harness.config.causes import Rule, rules_from_tables
from harness.config.signatures import Pattern, pattern_from_table
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.vocab import SourceKind

PIN_SCHEMA_VERSION = 1
UNVERIFIED = "UNVERIFIED"  # prefix of a value that has not been read from a real checkout yet


def project_root() -> Path:
    """The folder holding upstream_pin/ and scenarios/: this checkout (the harness is
    installed editable by setup.sh), or HARNESS_ROOT for an installed copy."""
    env = os.environ.get("HARNESS_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2]


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
    run_cwd: str  # "tree": the build tree (upstream reads ./config); "report": a fresh folder
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


_PLACEHOLDER = re.compile(r"\{(env|steps|tree)\}")


def render(template: str, **values: object) -> str:
    """Expand {env}, {steps} and {tree} only: shell's own ${VAR:-x} stays as written."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m[1], m[0])), template)


def _need(table: dict[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise HarnessError(f"{where}: missing required key '{key}'", USAGE)
    return table[key]


def _parser_name(value: Any, where: str) -> str:
    from harness.dashboard import PARSERS

    if value not in PARSERS:
        raise HarnessError(
            f"{where}: unknown parser {value!r} (known: {', '.join(sorted(PARSERS))})"
        )
    return str(value)


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HarnessError(f"{where}: expected a list of strings", USAGE)
    return tuple(value)


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise HarnessError(f"{where}: expected one of {', '.join(allowed)}, not {value!r}", USAGE)
    return str(value)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise HarnessError(f"{where}: expected a table of strings", USAGE)
    return {str(k): v for k, v in value.items()}


def parse_pin(data: dict[str, Any], file: Path, lineage: tuple[str, ...] = ()) -> Pin:
    try:
        return _parse_pin(data, file, lineage)
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise HarnessError(f"{file.name}: malformed pin: {exc!r}", USAGE) from exc


def _parse_pin(data: dict[str, Any], file: Path, lineage: tuple[str, ...]) -> Pin:
    where = file.name
    version = data.get("schema_version")
    if version != PIN_SCHEMA_VERSION:
        raise HarnessError(
            f"{where}: schema_version {version!r} is not supported (expected {PIN_SCHEMA_VERSION})"
        )
    src = _need(data, "source", where)
    try:
        kind = vocab.parse(SourceKind, _need(src, "kind", f"{where} [source]"), "kind")
    except ValueError as exc:
        raise HarnessError(f"{where} [source]: {exc}", USAGE) from None
    fields = {k: str(v) for k, v in src.items() if k in Source.__dataclass_fields__}
    fields.pop("kind")
    source = Source(kind, **fields)
    build = _need(data, "build", where)
    run = _need(data, "run", where)
    return Pin(
        name=str(_need(data, "name", where)),
        description=str(data.get("description", "")),
        file=file,
        source=source,
        envs=_str_list(_need(data, "envs", where), f"{where} envs"),
        parser=_parser_name(data.get("parser", "lines"), where),
        build_command=str(_need(build, "command", f"{where} [build]")),
        build_timeout_s=float(build.get("timeout_s", 600)),
        build_env=_str_map(build.get("env", {}), f"{where} [build.env]"),
        build_tools=tuple(build.get("tools", ())),
        build_outputs=tuple(build.get("outputs", ())),
        build_hints=tuple(Hint(h["pattern"], h["hint"]) for h in build.get("hints", [])),
        build_per_env=bool(build.get("per_env", True)),
        build_env_passthrough=tuple(str(v) for v in build.get("env_passthrough", ())),
        run_command=str(_need(run, "command", f"{where} [run]")),
        run_cwd=_choice(run.get("cwd", "tree"), ("tree", "report"), f"{where} [run] cwd"),
        run_env=_str_map(run.get("env", {}), f"{where} [run.env]"),
        config_files=tuple(run.get("config_files", ("config/default.ini", "config/{env}.ini"))),
        files=_str_map(data.get("files", {}), f"{where} [files]"),
        variants=_str_map(data.get("variants", {}), f"{where} [variants]"),
        fixes=_str_list(data.get("fixes", []), f"{where} fixes"),
        signatures=tuple(
            pattern_from_table(t, f"{where} [[signatures]]") for t in data.get("signatures", [])
        ),
        causes=rules_from_tables(data.get("causes", []), f"{where} [[causes]]"),
        raw=data,
        lineage=(str(data["name"]), *lineage),
    )


def available_pins() -> list[str]:
    return sorted(p.stem for p in pin_dir().glob("*.toml"))


MAX_EXTENDS = 8  # a deeper chain is a mistake, and a loop must end
# [[signatures]] of a pin come before those of the pin it extends (they locate first)
_PREPENDED = ("signatures", "causes")
# a source, or the file hashes that describe one commit of it, are replaced whole
_REPLACED = ("source", "files")


def _pin_path(name_or_path: str, base: Path | None = None) -> Path:
    path = Path(name_or_path)
    if path.suffix != ".toml":
        return pin_dir() / f"{name_or_path}.toml"
    if base is not None and not path.is_absolute():
        return (base / path).resolve()
    return path


def _read_pin(path: Path, name_or_path: str) -> dict[str, Any]:
    if not path.is_file():
        known = ", ".join(available_pins())
        raise HarnessError(f"unknown pin {name_or_path!r} (known: {known})")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path.name}: malformed TOML: {exc}") from exc


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
    if parent_ref is None:
        return data, ()
    where = path.name
    if not isinstance(parent_ref, str) or not parent_ref:
        raise HarnessError(f"{where}: extends must be a pin name or a .toml path", USAGE)
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
        "  files:",
    ]
    lines += [f"    {rel}  {digest}" for rel, digest in sorted(pin.files.items())]
    if s.kind is SourceKind.GIT and not s.commit_verified:
        lines.append(
            f"  UNVERIFIED: commit {s.commit}; "
            f"run `harness pin update --pin {pin.name} --checkout PATH`"
        )
    return "\n".join(lines)
