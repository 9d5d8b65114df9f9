"""Every config file is validated by its schema at load, before anything is built or run:
each finding of "config is read by hand and misread silently" as the bad TOML it is, the
one-line error it now gives (file, key path, what is wrong), the CLI's exit code for it, the
shipped files, and the docs against the JSON Schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.config.causes import shipped_rules
from harness.config.defaults import compare_baseline, default_pin
from harness.config.pin import available_pins, load_pin, pin_dir
from harness.config.scenario import available_scenarios, load_scenario
from harness.config.schemas import json_schemas, schema_keys
from harness.config.signatures import load_signatures
from harness.config.transform import available_transforms, load_transform, transform_dir
from harness.errors import HarnessError
from harness.outcome import USAGE
from tests.harness_cli import ROOT, harness

REPLICA = (pin_dir() / "replica").resolve()
PIN = f"""schema_version = 1
name = "t"
envs = ["breakout"]
parser = "puffer5"

[source]
kind = "path"
path = "{REPLICA}"

[build]
command = "bash build.sh {{env}}"
timeout_s = 300
tools = ["gcc"]

[run]
command = "./puffer train {{env}} --train.total-timesteps={{steps}}"
"""
SCENARIO = """schema_version = 1
env = "breakout"

[defaults]
steps = 1000
startup_s = 15
stall_s = 20
timeout_s = 120

[pin.replica]
"""
CHECK = '\n[[checks]]\nkind = "config"\nsection = "train"\nkey = "clip_coef"\nmin = 0\n'
TRANSFORM = """name = "t"
pragma = '^\\s*#\\s*pragma\\s+omp\\b'

[[targets]]
function = "env_start"
files = ["src/vecenv.h"]
"""


def refused(load: object, path: Path, text: str | bytes) -> str:
    """The one-line usage error `load(path)` gives for a file holding `text`."""
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(HarnessError) as info:
        load(str(path))  # type: ignore[operator]
    message = info.value.message
    assert info.value.exit_code == USAGE, message
    assert "\n" not in message and message.startswith(f"{path.name}: "), message
    return message


def bad_pin(tmp_path: Path, old: str, new: str) -> str:
    assert old in PIN
    return refused(load_pin, tmp_path / "p.toml", PIN.replace(old, new))


def bad_scenario(tmp_path: Path, text: str) -> str:
    return refused(load_scenario, tmp_path / "s.toml", text)


# ---------------------------------------------------------------- types: no coercion


def test_a_string_is_not_a_list_of_tools(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, 'tools = ["gcc"]', 'tools = "gcc"')
    assert message == 'p.toml: [build] tools: expected a list of strings, not "gcc"'


def test_trainer_args_as_one_string_are_refused(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO + 'args = "--train.x=1"\n')
    assert message == 's.toml: [pin.replica] args: expected a list of strings, not "--train.x=1"'


def test_true_is_not_a_timeout(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, "timeout_s = 300", "timeout_s = true")
    assert message == "p.toml: [build] timeout_s: expected a number, not true"
    message = bad_scenario(tmp_path, SCENARIO.replace("timeout_s = 120", "timeout_s = true"))
    assert message == "s.toml: [defaults] timeout_s: expected a number, not true"


def test_env_must_be_a_table_of_strings(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO + 'env = ["A"]\n')
    assert message.startswith("s.toml: [pin.replica] env: expected a table of strings"), message
    message = bad_pin(tmp_path, "[run]\n", "[run]\nenv = { A = 1 }\n")
    assert message.startswith("p.toml: [run] env: expected a table of strings"), message


# ---------------------------------------------------------------- ranges


def test_a_negative_build_timeout_is_refused(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, "timeout_s = 300", "timeout_s = -5")
    assert message == "p.toml: [build] timeout_s: must be > 0, not -5"


def test_negative_and_infinite_steps_are_refused(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO.replace("steps = 1000", "steps = -1"))
    assert message == "s.toml: [defaults] steps: must be > 0, not -1"
    message = bad_scenario(tmp_path, SCENARIO.replace("steps = 1000", "steps = inf"))
    assert message == "s.toml: [defaults] steps: expected an integer, not inf"
    message = bad_scenario(tmp_path, SCENARIO.replace("stall_s = 20", "stall_s = nan"))
    assert message == "s.toml: [defaults] stall_s: expected a finite number, not nan"


# ---------------------------------------------------------------- unknown keys


def test_an_unknown_key_is_refused_with_the_near_miss(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, "timeout_s = 300", "timout_s = 300")
    assert message == "p.toml: unknown key 'timout_s' in [build] (did you mean 'timeout_s'?)"
    message = bad_scenario(tmp_path, SCENARIO + "stall = 3\n")
    assert message == ("s.toml: unknown key 'stall' in [pin.replica] (did you mean 'stall_s'?)")


def test_an_unknown_key_in_a_pin_that_extends_names_that_file(tmp_path: Path) -> None:
    child = tmp_path / "child.toml"
    text = 'schema_version = 1\nname = "child"\nextends = "replica"\n[run]\nenvv = { A = "1" }\n'
    message = refused(load_pin, child, text)
    assert message == "child.toml: unknown key 'envv' in [run] (did you mean 'env'?)"


def test_the_merged_pin_is_validated_too(tmp_path: Path) -> None:
    """A pin that extends another may leave keys to it; what the merge lacks is refused."""
    (tmp_path / "base.toml").write_text(PIN.replace('[run]\ncommand = "./puffer', '[x]\ny = "'))
    message = refused(
        load_pin, tmp_path / "child.toml", 'schema_version = 1\nname = "c"\nextends = "base.toml"\n'
    )
    assert "unknown key 'x'" in message or "missing required key 'run'" in message, message
    (tmp_path / "base.toml").write_text(PIN.replace('[run]\ncommand = "./puffer train', "#"))
    message = refused(
        load_pin, tmp_path / "child.toml", 'schema_version = 1\nname = "c"\nextends = "base.toml"\n'
    )
    assert message.startswith("child.toml: ") and "run" in message, message


# ---------------------------------------------------------------- checks


def test_a_check_key_must_be_a_string(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO + CHECK.replace('key = "clip_coef"', "key = 5"))
    assert message == "s.toml: [[checks]] #1 key: expected a string, not 5"


def test_a_check_section_must_be_a_string(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO + CHECK.replace('section = "train"', "section = 7"))
    assert message == "s.toml: [[checks]] #1 section: expected a string, not 7"


def test_a_check_missing_what_its_kind_needs(tmp_path: Path) -> None:
    message = bad_scenario(tmp_path, SCENARIO + CHECK.replace('section = "train"\n', ""))
    assert message == "s.toml: [[checks]] #1: check 'config' needs section"


# ---------------------------------------------------------------- templates and regexes


def test_an_unknown_placeholder_in_config_files(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, "[run]\n", '[run]\nconfig_files = ["config/{envv}.ini"]\n')
    assert message.startswith("p.toml: [run] config_files: unknown placeholder {envv}"), message
    message = bad_scenario(tmp_path, SCENARIO + 'config_files = ["c/{steps}.ini"]\n')
    assert "[pin.replica] config_files: unknown placeholder {steps}" in message


def test_an_unknown_placeholder_in_a_command(tmp_path: Path) -> None:
    message = bad_pin(tmp_path, "bash build.sh {env}", "bash build.sh {steps} ${CC:-gcc}")
    assert message == (
        "p.toml: [build] command: unknown placeholder {steps} (this template takes {env})"
    )


def test_a_bad_build_hint_regex_is_refused_at_load(tmp_path: Path) -> None:
    hint = '[[build.hints]]\npattern = "(unclosed"\nhint = "x"\n\n[run]\n'
    message = bad_pin(tmp_path, "[run]\n", hint)
    assert message.startswith('p.toml: [[build.hints]] #1 pattern: bad regex "(unclosed"')


def test_a_bad_signature_regex_is_refused_at_load(tmp_path: Path) -> None:
    sig = '\n[[signatures]]\nname = "s"\nfunctions = ["env_start", "*x"]\n'
    message = refused(load_pin, tmp_path / "p.toml", PIN + sig)
    assert message.startswith('p.toml: [[signatures]] #1 functions: bad regex "*x"'), message


# ---------------------------------------------------------------- bytes and structure


def test_invalid_utf8_is_one_line(tmp_path: Path) -> None:
    message = refused(load_pin, tmp_path / "p.toml", PIN.encode() + b"\n# caf\xe9\n")
    assert message.startswith("p.toml: not UTF-8 text (byte 0xe9 at offset "), message
    message = refused(load_scenario, tmp_path / "s.toml", b"\xff\xfe" + SCENARIO.encode())
    assert message == "s.toml: not UTF-8 text (byte 0xff at offset 0)"


def test_malformed_toml_is_one_line(tmp_path: Path) -> None:
    message = refused(load_pin, tmp_path / "p.toml", PIN + "name = [\n")
    assert message.startswith("p.toml: malformed TOML: "), message


@pytest.mark.parametrize("depth", [40, 5000])
def test_deeply_nested_tables_are_one_line(tmp_path: Path, depth: int) -> None:
    dotted = ".".join(f"t{i}" for i in range(depth))
    message = refused(load_pin, tmp_path / "p.toml", PIN + f"\n[{dotted}]\nx = 1\n")
    assert "nested" in message, message
    inline = "[" * depth + "]" * depth
    message = refused(load_scenario, tmp_path / "s.toml", SCENARIO + f"x = {inline}\n")
    assert "nested" in message or "unknown key" in message, message


# ---------------------------------------------------------------- paths and names


@pytest.mark.parametrize("key", ["/etc/shadow", "../x", "src/../../x"])
def test_files_keys_outside_the_tree_are_refused(tmp_path: Path, key: str) -> None:
    message = refused(load_pin, tmp_path / "p.toml", PIN + f'\n[files]\n"{key}" = "UNVERIFIED"\n')
    assert message.startswith(f'p.toml: [files] "{key}": must '), message


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "-x", "a b"])
def test_pin_and_env_names_are_plain_names(tmp_path: Path, bad: str) -> None:
    """They become folder names (the build cache entry, logs/<env>): never a path."""
    message = bad_pin(tmp_path, 'envs = ["breakout"]', f'envs = ["breakout", "{bad}"]')
    assert message.startswith("p.toml: envs: ") and "not a plain name" in message, message
    message = bad_pin(tmp_path, 'name = "t"', f'name = "{bad}"')
    assert message.startswith("p.toml: name: ") and "not a plain name" in message, message


@pytest.mark.parametrize("name", ["../../evil", "/tmp/evil", "a/b", ".hidden", "..", "a\\b"])
def test_a_transform_name_is_a_name(name: str) -> None:
    with pytest.raises(HarnessError) as info:
        load_transform(name)
    message = info.value.message
    assert info.value.exit_code == USAGE and "\n" not in message
    assert message.startswith(f"variant omp-free:{name}: a transform is a name"), message


def test_an_unknown_transform_lists_the_known_ones() -> None:
    with pytest.raises(HarnessError) as info:
        load_transform("nope")
    assert "known: omp-free" in info.value.message


@pytest.mark.parametrize(("entry", "why"), [("/etc/passwd", "absolute"), ("../../x.c", "no '..'")])
def test_transform_files_outside_the_tree_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, why: str
) -> None:
    root = tmp_path / "root"
    (root / "upstream_pin" / "fixes").mkdir(parents=True)
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    assert transform_dir() == root / "upstream_pin" / "fixes"
    text = TRANSFORM.replace('["src/vecenv.h"]', f'["src/vecenv.h", "{entry}"]')
    (transform_dir() / "evil.toml").write_text(text)
    with pytest.raises(HarnessError) as info:
        load_transform("evil")
    message = info.value.message
    assert message.startswith("evil.toml: [[targets]] #1 files: ") and why in message, message
    assert entry in message and "\n" not in message


# ---------------------------------------------------------------- several errors


def test_several_errors_are_one_line_naming_each_place(tmp_path: Path) -> None:
    text = PIN.replace('tools = ["gcc"]', 'tools = "gcc"').replace("300", "-1")
    message = refused(load_pin, tmp_path / "p.toml", text + "\n[nonsense]\n")
    assert message.startswith("p.toml: unknown key 'nonsense'"), message
    assert message.endswith("(and 2 more: [build] timeout_s, [build] tools)"), message


# ---------------------------------------------------------------- what ships validates


def test_every_shipped_config_file_validates() -> None:
    pins = [load_pin(name) for name in available_pins()]
    scenarios = [load_scenario(name) for name in available_scenarios()]
    transforms = [load_transform(name) for name in available_transforms()]
    assert len(pins) >= 3 and len(scenarios) >= 3 and len(transforms) >= 2
    assert len(shipped_rules()) >= 5 and load_signatures().runtime
    assert default_pin(None) in available_pins() and compare_baseline()


# ---------------------------------------------------------------- the CLI


def _one_line_usage(res_code: int, stderr: str) -> None:
    assert res_code == USAGE, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), stderr
    assert "Traceback" not in stderr


@pytest.mark.timeout(120)
def test_the_cli_refuses_bad_config_before_any_build(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {"HARNESS_CACHE_DIR": str(cache)}
    pin = tmp_path / "p.toml"
    pin.write_text(PIN.replace('tools = ["gcc"]', 'tools = "gcc"'))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.replace("steps = 1000", "steps = -1"))
    cases = [
        (("run", "breakout", "--pin", str(pin)), "p.toml: [build] tools"),
        (("build", "breakout", "--pin", str(pin)), "p.toml: [build] tools"),
        (("run", "breakout", "--scenario", str(scenario)), "s.toml: [defaults] steps"),
        (("run", "breakout", "--variant", "omp-free:../../evil"), "a transform is a name"),
        (("pin", "show", "--pin", str(pin)), "expected a list of strings"),
    ]
    for args, words in cases:
        res = harness(*args, report_root=tmp_path / "r", env=env)
        _one_line_usage(res.code, res.stderr)
        assert words in res.stderr, (args, res.stderr)
        assert res.elapsed < 60, (args, res.elapsed)
    built = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert built == [], built  # nothing was built for any of them


@pytest.mark.timeout(60)
def test_pin_schema_writes_the_json_schemas(tmp_path: Path) -> None:
    res = harness("pin", "schema", "--out", str(tmp_path / "s"), report_root=tmp_path)
    assert res.code == 0, res.stderr
    written = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert written == [f"{n}.schema.json" for n in sorted(json_schemas())]
    pin_schema = json.loads((tmp_path / "s" / "pin.schema.json").read_text())
    assert pin_schema == json_schemas()["pin"] and "build" in pin_schema["properties"]
    res = harness("pin", "schema", report_root=tmp_path)
    assert res.code == 0 and json.loads(res.stdout) == json_schemas()


# ---------------------------------------------------------------- docs against schemas

_KEY = re.compile(r"^\s*#?\s*([a-z_][a-z0-9_]*)\s*=", re.M)
_TABLE = re.compile(r"^\s*\[\[?([a-z_.\"0-9-]+)\]\]?", re.M)


def _documented(doc: str) -> tuple[set[str], set[str]]:
    """(keys set in the doc's TOML examples, every word written as `code` or key = )."""
    text = (ROOT / "docs" / doc).read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    keys: set[str] = set()
    for block in blocks:
        keys |= set(_KEY.findall(block))
        for table in _TABLE.findall(block):
            keys |= {p for p in table.split(".") if re.fullmatch(r"[a-z_]+", p)}
    named = set(re.findall(r"`([a-z_][a-z0-9_]*)`", text)) | keys
    return keys, named


@pytest.mark.parametrize(
    ("doc", "schemas"),
    [("pin-schema.md", ("pin", "causes", "transform")), ("scenario-schema.md", ("scenario",))],
)
def test_the_schema_docs_name_every_key_and_no_other(doc: str, schemas: tuple[str, ...]) -> None:
    all_schemas = json_schemas()
    keys: set[str] = set()
    for name in schemas:
        keys |= schema_keys(all_schemas[name])
    in_examples, named = _documented(doc)
    assert keys and in_examples
    assert sorted(keys - named) == [], f"{doc} does not name these keys of the schema"
    # table names that are not keys: a pin's own [pin.<name>] and the parts of dotted names
    free = {"replica", "fixed"}
    assert sorted(in_examples - keys - free) == [], f"{doc} shows keys the schema lacks"


def test_a_huge_timeout_is_refused_at_load(tmp_path: Path) -> None:
    """Finite but past what subprocess and threading accept (1e300 overflows their waits):
    refused at load, not an internal error after the tree is prepared."""
    message = bad_pin(tmp_path, "timeout_s = 300", "timeout_s = 1e300")
    assert message.startswith("p.toml: [build] timeout_s: "), message
