"""Property-based fuzzing of the config loaders (pin, scenario, transform): whatever a file
holds, loading it gives a valid object or a HarnessError with a one-line message and the
usage exit code, never another exception.

Three kinds of input: random bytes; random TOML-ish tables written by the tiny writer below
(any keys, any values); and mutations of the shipped files (one key's value swapped for a
random one), which reach deep into the schemas. Example counts are printed (pytest -s) and
kept small enough for the whole file to run in about 15 s.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.config.pin import Pin, load_pin, pin_dir
from harness.config.scenario import Scenario, load_scenario, scenario_dir
from harness.config.schema_errors import read_toml
from harness.config.transform import Transform, load_transform
from harness.errors import HarnessError
from harness.outcome import USAGE

EXAMPLES = 100  # per fuzzer; 11 fuzzers: 1100 examples
COUNTS: dict[str, int] = {}
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)

# ---------------------------------------------------------------- a tiny TOML writer

KEYS = st.sampled_from(
    [
        "schema_version", "name", "env", "envs", "parser", "source", "kind", "path", "url",
        "commit", "build", "run", "command", "timeout_s", "tools", "outputs", "env_passthrough",
        "hints", "pattern", "hint", "per_env", "cwd", "config_files", "files", "variants",
        "fixes", "signatures", "functions", "causes", "defaults", "pin", "steps", "startup_s",
        "stall_s", "args", "checks", "key", "keys", "section", "min", "max", "targets",
        "function", "pragma", "extends", "probe", "log", "../x", "/etc/shadow", "a b", "é",
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["{env}", "{steps}", "{nope}", "(unclosed", "../../evil", "/abs", "git"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def toml_key(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_doc(table: dict[str, Any]) -> str:
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in table.items())


# ---------------------------------------------------------------- the property


def loads_or_refuses(load: Callable[[str], object], arg: str, kind: type) -> None:
    try:
        result = load(arg)
    except HarnessError as exc:
        assert exc.exit_code == USAGE, exc.message
        assert exc.message and "\n" not in exc.message and "\r" not in exc.message
        return
    assert isinstance(result, kind)


def count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report_counts() -> Any:
    yield
    print("\nfuzz example counts:", json.dumps(COUNTS, sort_keys=True))


LOADERS: dict[str, tuple[Callable[[str], object], type]] = {
    "pin": (load_pin, Pin),
    "scenario": (load_scenario, Scenario),
}


@pytest.mark.parametrize("what", ["pin", "scenario"])
@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(tmp_path: Path, what: str, data: bytes) -> None:
    count(f"{what}-bytes")
    path = tmp_path / f"{what}.toml"
    path.write_bytes(data)
    load, kind = LOADERS[what]
    loads_or_refuses(load, str(path), kind)


@pytest.mark.parametrize("what", ["pin", "scenario"])
@FUZZ
@given(table=st.dictionaries(KEYS, VALUES, max_size=6))
def test_random_tables(tmp_path: Path, what: str, table: dict[str, Any]) -> None:
    count(f"{what}-tables")
    path = tmp_path / f"{what}.toml"
    path.write_text(toml_doc({"schema_version": 1, **table}))
    load, kind = LOADERS[what]
    loads_or_refuses(load, str(path), kind)


def _mutate(base: dict[str, Any], where: list[int], value: Any) -> dict[str, Any]:
    """`base` with the value at a path (chosen by `where`) replaced by `value`."""
    out: Any = json.loads(json.dumps(base, default=str))
    node = out
    for step in where:
        if isinstance(node, dict) and node:
            key = sorted(node)[step % len(node)]
            if not isinstance(node[key], dict | list) or step % 3 == 0:
                node[key] = value
                return dict(out)
            node = node[key]
        elif isinstance(node, list) and node:
            i = step % len(node)
            if not isinstance(node[i], dict | list) or step % 3 == 0:
                node[i] = value
                return dict(out)
            node = node[i]
    return dict(out)


def _toml_doc_nested(table: dict[str, Any]) -> str:
    # inline tables and arrays of them say it all, in one line per top-level key
    return toml_doc(table)


OMP_FREE = (pin_dir() / "fixes" / "omp-free.toml").read_text()  # before HARNESS_ROOT moves
SHIPPED = {
    "pin": (pin_dir() / "pufferlib-3.0.0.toml", load_pin, Pin),
    "scenario": (scenario_dir() / "breakout.toml", load_scenario, Scenario),
}


@pytest.mark.parametrize("what", ["pin", "scenario"])
@FUZZ
@given(where=st.lists(st.integers(0, 50), min_size=1, max_size=5), value=VALUES)
def test_mutated_shipped_files(tmp_path: Path, what: str, where: list[int], value: Any) -> None:
    count(f"{what}-mutated")
    source, load, kind = SHIPPED[what]
    base = read_toml(source)
    path = tmp_path / f"{what}.toml"
    path.write_text(_toml_doc_nested(_mutate(base, where, value)))
    loads_or_refuses(load, str(path), kind)


@pytest.fixture
def fixes_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "root" / "upstream_pin" / "fixes"
    folder.mkdir(parents=True)
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "root"))
    return folder


@FUZZ
@given(data=st.binary(max_size=300))
def test_transform_random_bytes(fixes_root: Path, data: bytes) -> None:
    count("transform-bytes")
    (fixes_root / "t.toml").write_bytes(data)
    loads_or_refuses(load_transform, "t", Transform)


@FUZZ
@given(where=st.lists(st.integers(0, 50), min_size=1, max_size=4), value=VALUES)
def test_transform_mutated(fixes_root: Path, where: list[int], value: Any) -> None:
    count("transform-mutated")
    base = tomllib.loads(OMP_FREE)
    (fixes_root / "t.toml").write_text(toml_doc(_mutate(base, where, value)))
    loads_or_refuses(load_transform, "t", Transform)


@FUZZ
@given(name=st.text(max_size=30))
def test_transform_names(fixes_root: Path, name: str) -> None:
    count("transform-names")
    (fixes_root / "ok.toml").write_text(OMP_FREE)
    loads_or_refuses(load_transform, name, Transform)


@pytest.mark.parametrize("what", ["pin", "scenario"])
@FUZZ
@given(name=st.text(max_size=30) | st.text(max_size=20).map(lambda t: t + ".toml"))
def test_pin_and_scenario_names(what: str, name: str) -> None:
    count(f"{what}-names")
    load, kind = LOADERS[what]
    loads_or_refuses(load, name, kind)
