"""The schema of a pin (upstream_pin/<name>.toml) as pydantic models: what each key may hold.
harness.config.pin validates a pin's file (and each file it extends) against `PinModel`,
then builds the typed `Pin` the rest of the harness reads. `harness pin schema` writes these
models as JSON Schema; docs/pin-schema.md is tested against it."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from harness.config.causes import CauseModel, KnobList
from harness.config.fields import (
    WORD,
    BuildTemplate,
    EnvPath,
    NameList,
    PlainName,
    Regex,
    RelPath,
    RunTemplate,
    Seconds,
    Strict,
    StrList,
    StrMap,
    Text,
    fail,
    one_of,
    schema_version,
)
from harness.config.schema_errors import is_config_file, show
from harness.config.signatures import SignatureModel
from harness.vocab import RunCwd, SourceKind

PIN_SCHEMA_VERSION = 1


def parser_names() -> tuple[str, ...]:
    from harness.dashboard import PARSERS

    return tuple(sorted(PARSERS))


def probe_drivers() -> tuple[str, ...]:
    folder = resources.files("harness").joinpath("data/probe")
    return tuple(sorted(p.name[:-2] for p in folder.iterdir() if p.name.endswith(".c")))


ParserName = Annotated[
    str,
    AfterValidator(one_of(parser_names, "parser")),
    WithJsonSchema({"type": "string", "enum": list(parser_names())}),
]


class SourceModel(Strict):
    """[source]: where the upstream's code comes from; which keys a kind needs is checked."""

    kind: Annotated[SourceKind, WORD]
    url: str = ""
    branch: str = ""
    commit: str = ""
    path: str = ""  # kind "path": a folder relative to the pin's file
    package: str = ""
    version: str = ""
    sha256: str = ""
    filename: str = ""

    @model_validator(mode="after")
    def _complete(self) -> SourceModel:
        needs = {
            SourceKind.GIT: ("url", "commit"),
            SourceKind.PYPI: ("package", "version"),
            SourceKind.PATH: ("path",),
        }[self.kind]
        missing = [k for k in needs if not getattr(self, k)]
        if missing:
            raise fail(f"a {self.kind} source needs {', '.join(missing)}")
        return self


class HintModel(Strict):
    """[[build.hints]]: the first pattern found in a failed build's log gives its hint."""

    pattern: Regex
    hint: Text


class BuildModel(Strict):
    """[build]: the upstream's own build command, run in the prepared tree."""

    command: BuildTemplate
    timeout_s: Seconds = 600
    env: StrMap = Field(default_factory=dict)
    tools: StrList = Field(default_factory=list)
    outputs: list[RelPath] = Field(default_factory=list)
    hints: list[HintModel] = Field(default_factory=list)
    per_env: bool = True
    env_passthrough: StrList = Field(default_factory=list)


DEFAULT_CONFIG_FILES = ("config/default.ini", "config/{env}.ini")


class RunModel(Strict):
    """[run]: the trainer's command and where it runs."""

    command: RunTemplate
    cwd: Annotated[RunCwd, WORD] = RunCwd.TREE
    # what the trainer writes into its working folder (cwd = "tree"): fresh in each run's
    # own folder, so that runs of one build at once never read each other's logs
    writes: NameList = Field(default_factory=lambda: ["logs", "checkpoints"])
    env: StrMap = Field(default_factory=dict)
    config_files: list[EnvPath] = Field(default_factory=lambda: list(DEFAULT_CONFIG_FILES))


class PrepareModel(Strict):
    """[prepare]: pypi sources only, applied to the unpacked sdist."""

    mkdirs: list[RelPath] = Field(default_factory=list)
    remove: list[RelPath] = Field(default_factory=list)


class PinProbeModel(Strict):
    """[probe]: how `harness probe` compiles the reward probe against the env header."""

    driver: Annotated[str, AfterValidator(one_of(probe_drivers, "probe driver"))]
    header: EnvPath = "ocean/{env}/{env}.h"
    include: list[RelPath] = Field(default_factory=list)


def _git_ref(value: str) -> str:
    # a ref is handed to git as an argument: a leading '-' would be read as an option
    if not value or value.startswith("-") or any(c.isspace() or ord(c) < 32 for c in value):
        raise fail(f"expected a git ref (a tag, a branch or a commit), not {show(value)}")
    return value


def project_root() -> Path:
    """The folder holding upstream_pin/, scenarios/ and hosts/: this checkout (the harness is
    installed editable by setup.sh), or HARNESS_ROOT for an installed copy. Here rather than
    in config/pin.py (which re-exports it) so that a pin's [triage] hosts can be checked
    against hosts/ without importing config/hostprofile.py, which imports config/pin.py."""
    env = os.environ.get("HARNESS_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2]


def _host_profile(name: str) -> str:
    """A host profile's name: a file hosts/NAME.toml (the name grammar is PlainName, the one
    harness.config.hostprofile.check_name applies to `--host NAME`)."""
    folder = project_root() / "hosts"
    if ".." in name or not is_config_file(folder / f"{name}.toml"):
        try:
            known = sorted(p.stem for p in folder.glob("*.toml") if is_config_file(p))
        except OSError:
            known = []
        raise fail(f"no host profile {name!r} (known: {', '.join(known) or 'none'})")
    return name


class TriageModel(Strict):
    """[triage]: what `harness triage` tries beyond the stock run (docs/pin-schema.md)."""

    # the knobs the investigation sweeps (an upstream report's, say)
    knobs: KnobList = Field(default_factory=list)
    # refs History may start its search for a passing commit from (git sources only)
    known_good: list[Annotated[str, AfterValidator(_git_ref)]] = Field(default_factory=list)
    # host profiles to try when the failure does not reproduce on this host
    hosts: list[Annotated[PlainName, AfterValidator(_host_profile)]] = Field(default_factory=list)


class PinModel(Strict):
    """upstream_pin/<name>.toml (after merging what it `extends`)."""

    schema_version: Annotated[int, AfterValidator(schema_version(PIN_SCHEMA_VERSION))]
    name: PlainName
    extends: Text | None = None  # a pin name or a .toml path relative to this file
    description: str = ""
    envs: Annotated[NameList, Field(min_length=1)]
    parser: ParserName = "lines"
    fixes: StrList = Field(default_factory=list)
    source: SourceModel
    build: BuildModel
    run: RunModel
    prepare: PrepareModel | None = None
    probe: PinProbeModel | None = None
    variants: StrMap = Field(default_factory=dict)
    signatures: list[SignatureModel] = Field(default_factory=list)
    # validated by harness.config.causes.rules_from_tables (its errors name the cause id)
    causes: list[CauseModel] = Field(default_factory=list)
    # path relative to the source root → its sha256, or "UNVERIFIED…"
    files: dict[RelPath, str] = Field(default_factory=dict)
    triage: TriageModel | None = None

    @model_validator(mode="after")
    def _history_needs_git(self) -> PinModel:
        if self.triage and self.triage.known_good and self.source.kind is not SourceKind.GIT:
            raise fail(f"[triage] known_good needs a git source, not a {self.source.kind} one")
        return self


def pin_json_schema() -> dict[str, Any]:
    return PinModel.model_json_schema()
