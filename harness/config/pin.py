"""Pins: which upstream the harness drives, as data (upstream_pin/*.toml).

A pin names the source (a git commit, a PyPI sdist, or an in-repo path), the files whose
sha256 must match before a result is trusted, the build and run command templates, the
output parser, the tools it needs, the variants it defines, and the names of the upstream's
own functions that locate a hang (signatures). See docs/pin-schema.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.classify import Pattern, pattern_from_table
from harness.errors import USAGE, HarnessError

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
    kind: str  # "git" | "pypi" | "path"
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
    signatures: tuple[Pattern, ...]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def source_root(self) -> Path | None:
        """The in-repo source folder for kind "path" pins; None for external sources."""
        if self.source.kind != "path":
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


def parse_pin(data: dict[str, Any], file: Path) -> Pin:
    try:
        return _parse_pin(data, file)
    except HarnessError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise HarnessError(f"{file.name}: malformed pin: {exc!r}", USAGE) from exc


def _parse_pin(data: dict[str, Any], file: Path) -> Pin:
    where = file.name
    version = data.get("schema_version")
    if version != PIN_SCHEMA_VERSION:
        raise HarnessError(
            f"{where}: schema_version {version!r} is not supported (expected {PIN_SCHEMA_VERSION})"
        )
    src = _need(data, "source", where)
    kind = _need(src, "kind", f"{where} [source]")
    if kind not in ("git", "pypi", "path"):
        raise HarnessError(f"{where} [source]: kind must be git, pypi or path, not {kind!r}")
    source = Source(**{k: str(v) for k, v in src.items() if k in Source.__dataclass_fields__})
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
        signatures=tuple(
            pattern_from_table(t, f"{where} [[signatures]]") for t in data.get("signatures", [])
        ),
        raw=data,
    )


def available_pins() -> list[str]:
    return sorted(p.stem for p in pin_dir().glob("*.toml"))


def load_pin(name_or_path: str) -> Pin:
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = pin_dir() / f"{name_or_path}.toml"
    if not path.is_file():
        known = ", ".join(available_pins())
        raise HarnessError(f"unknown pin {name_or_path!r} (known: {known})")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise HarnessError(f"{path.name}: malformed TOML: {exc}") from exc
    return parse_pin(data, path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_env(pin: Pin, env: str) -> None:
    if env not in pin.envs:
        raise HarnessError(f"unknown env {env!r} for pin {pin.name} (known: {', '.join(pin.envs)})")


@dataclass
class FileCheck:
    path: str
    expected: str
    actual: str | None  # None when the file is missing
    status: str  # "match" | "differs" | "missing" | "unverified"


@dataclass
class Verification:
    """What was checked about the source before trusting a result."""

    status: str  # "verified" | "drift" | "unverified" | "unchecked"
    source: str
    commit_expected: str = ""
    commit_actual: str = ""
    dirty: list[str] = field(default_factory=list)
    files: list[FileCheck] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # pin fields not yet read from a checkout
    notes: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> list[FileCheck]:
        return [f for f in self.files if f.status in ("differs", "missing")]

    def describe(self) -> str:
        parts = [self.status]
        if self.drifted:
            parts.append("drift in " + ", ".join(f.path for f in self.drifted))
        if self.dirty:
            parts.append(f"{len(self.dirty)} uncommitted change(s)")
        if (
            self.commit_expected
            and self.commit_actual
            and self.commit_actual != self.commit_expected
        ):
            parts.append(f"HEAD {self.commit_actual[:12]} ≠ pinned {self.commit_expected[:12]}")
        if self.unverified:
            parts.append("unverified: " + ", ".join(self.unverified))
        return "; ".join(parts)


def check_files(pin: Pin, root: Path) -> list[FileCheck]:
    checks = []
    for rel, expected in sorted(pin.files.items()):
        path = root / rel
        actual = sha256_file(path) if path.is_file() else None
        if expected.startswith(UNVERIFIED):
            status = "unverified"
        elif actual is None:
            status = "missing"
        else:
            status = "match" if actual == expected else "differs"
        checks.append(FileCheck(rel, expected, actual, status))
    return checks


def summarize(v: Verification) -> Verification:
    """Set the overall status from the parts: any drift wins, then anything unverified."""
    if (
        v.drifted
        or v.dirty
        or (
            v.commit_expected
            and v.commit_actual
            and v.commit_actual != v.commit_expected
            and not v.commit_expected.startswith(UNVERIFIED)
        )
    ):
        v.status = "drift"
    elif v.unverified or any(f.status == "unverified" for f in v.files):
        v.status = "unverified"
    else:
        v.status = "verified"
    return v


def verify_path_source(pin: Pin, root: Path) -> Verification:
    v = Verification("unchecked", f"path {root}", files=check_files(pin, root))
    if not pin.files:
        v.unverified.append("files (the pin lists none)")
    return summarize(v)


def _one_line(command: str) -> str:
    lines = [ln for ln in command.strip().splitlines() if ln.strip()]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... ({len(lines)} lines)"


def describe_pin(pin: Pin) -> str:
    s = pin.source
    where = {
        "git": f"{s.url} branch {s.branch} commit {s.commit}",
        "pypi": f"PyPI {s.package}=={s.version} sha256 {s.sha256 or UNVERIFIED}",
        "path": f"in-repo folder {pin.source_root}",
    }[s.kind]
    lines = [
        f"pin {pin.name}: {pin.description}",
        f"  file:     {pin.file}",
        f"  source:   {where}",
        f"  envs:     {', '.join(pin.envs)}",
        f"  build:    {_one_line(pin.build_command)}  (tools: {', '.join(pin.build_tools) or '-'})",
        f"  run:      {pin.run_command}  (parser: {pin.parser})",
        f"  variants: {', '.join(f'{k} = {v}' for k, v in pin.variants.items()) or '-'}",
        f"  signatures: {', '.join(sig.name for sig in pin.signatures) or '-'}",
        "  files:",
    ]
    lines += [f"    {rel}  {digest}" for rel, digest in sorted(pin.files.items())]
    if s.kind == "git" and not s.commit_verified:
        lines.append(
            f"  UNVERIFIED: commit {s.commit}; "
            f"run `harness pin update --pin {pin.name} --checkout PATH`"
        )
    return "\n".join(lines)


def describe_verification(pin: Pin, v: Verification) -> str:
    lines = [f"pin {pin.name}: {v.status.upper()} ({v.source})"]
    if v.commit_expected or v.commit_actual:
        lines.append(f"  commit: pinned {v.commit_expected or '-'}, found {v.commit_actual or '-'}")
    for f in v.files:
        if f.status == "match":
            lines.append(f"  ok        {f.path}")
        elif f.status == "unverified":
            lines.append(
                f"  UNVERIFIED {f.path} (no hash pinned yet; found {f.actual or 'missing'})"
            )
        else:
            lines.append(
                f"  DRIFT     {f.path}: pinned {f.expected}, found {f.actual or 'missing'}"
            )
    lines += [f"  dirty     {d}" for d in v.dirty]
    lines += [f"  unverified: {u}" for u in v.unverified]
    lines += [f"  note: {n}" for n in v.notes]
    return "\n".join(lines)
