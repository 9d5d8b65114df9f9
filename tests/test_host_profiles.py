"""Host profiles as data (hosts/<name>.toml): the schema refuses what is wrong in one line
naming the file and the key, a profile is named and never pathed, `--host NAME` applies a
profile and a flag overrides one of its values (a real run), and docs/hosts.md names every
key of the schema. docs/hosts.md."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from harness.config.hostprofile import (
    HostProfile,
    host_names,
    load_host,
    parse_cpus,
    parse_size,
)
from harness.config.schemas import json_schemas, schema_keys
from harness.errors import HarnessError
from harness.execute.conditions import HostConditions, allowed_cpus
from harness.outcome import PASS, USAGE
from tests.harness_cli import ROOT, harness

pytestmark = pytest.mark.timeout(60)


def _bad(tmp_path: Path, body: str, name: str = "bad") -> str:
    (tmp_path / f"{name}.toml").write_text(body)
    with pytest.raises(HarnessError) as info:
        load_host(name, tmp_path)
    assert info.value.exit_code == USAGE
    message = info.value.message
    assert "\n" not in message, message
    return message


def test_an_unknown_key_is_one_line_with_the_nearest_known(tmp_path: Path) -> None:
    message = _bad(tmp_path, "cpu = 1\n")
    assert message == "hosts/bad.toml: unknown key 'cpu' (did you mean 'cpus'?)"


def test_an_unknown_key_in_a_table_is_refused(tmp_path: Path) -> None:
    message = _bad(tmp_path, '[environment]\nA = "1"\n')
    assert message.startswith("hosts/bad.toml: unknown key 'environment'"), message


@pytest.mark.parametrize(
    ("body", "start"),
    [
        ('load = "1"\n', 'hosts/bad.toml: load: expected an integer, not "1"'),
        ("load = true\n", "hosts/bad.toml: load: expected an integer, not true"),
        ("load = 65\n", "hosts/bad.toml: load: must be <= 64, not 65"),
        ("cpus = true\n", "hosts/bad.toml: cpus: expected a CPU count or a CPU list such as"),
        ("cpus = 0\n", "hosts/bad.toml: cpus: a CPU count must be between 1 and"),
        ('cpus = "0,x"\n', "hosts/bad.toml: cpus: not a CPU list: '0,x'"),
        ("cpu_quota = 0\n", "hosts/bad.toml: cpu_quota: must be > 0"),
        ("cpu_quota = nan\n", "hosts/bad.toml: cpu_quota"),
        ('memory = "lots"\n', "hosts/bad.toml: memory: not a size: 'lots'"),
        ("memory = 512\n", "hosts/bad.toml: memory: expected a string, not 512"),
        ("[env]\nA = 1\n", "hosts/bad.toml: env: expected a table of strings"),
        ("description = [1]\n", "hosts/bad.toml: description: expected a string"),
        ("cpus = \n", "bad.toml: malformed TOML"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key(tmp_path: Path, body: str, start: str) -> None:
    message = _bad(tmp_path, body)
    assert message.startswith(start), message


@pytest.mark.parametrize(
    "name", ["../upstream_pin/replica", "/etc/passwd", "a/b", "..", ".hidden", "a\\b", ""]
)
def test_a_profile_is_named_never_pathed(tmp_path: Path, name: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.toml").write_text("load = 1\n")  # would load, were paths followed
    with pytest.raises(HarnessError) as info:
        load_host(name, tmp_path)
    assert info.value.exit_code == USAGE
    assert "a host profile is named, not pathed" in info.value.message
    assert "\n" not in info.value.message


def test_an_unknown_profile_names_the_known_ones(tmp_path: Path) -> None:
    (tmp_path / "one.toml").write_text("")
    with pytest.raises(HarnessError) as info:
        load_host("two", tmp_path)
    assert info.value.message == "--host 'two': no such host profile (known: one)"


def test_a_path_like_host_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    res = harness("watch", "--host", "../upstream_pin/replica", "--", "true", report_root=tmp_path)
    assert res.code == USAGE and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0, res.stderr
    assert "a host profile is named, not pathed" in res.stderr
    assert res.report_dir is None


def test_every_shipped_profile_loads() -> None:
    names = host_names()
    assert {"container-1cpu", "noisy-2cpu"} <= set(names), names
    for name in names:
        profile = load_host(name)
        assert isinstance(profile, HostProfile) and profile.description


def test_a_full_profile_reads_as_its_values(tmp_path: Path) -> None:
    (tmp_path / "full.toml").write_text(
        textwrap.dedent(
            """
            description = "all of it"
            cpus = "1"
            cpu_quota = 1
            memory = "64MiB"
            load = 2
            [env]
            OMP_NUM_THREADS = "1"
            """
        )
    )
    profile = load_host("full", tmp_path)
    assert profile.cpus == 1  # a plain number is a count, as for --cpus
    assert (profile.cpu_quota, profile.memory_bytes, profile.load) == (1, 64 << 20, 2)
    assert profile.env == {"OMP_NUM_THREADS": "1"}
    cond = HostConditions.from_profile(profile)
    assert cond.cpus == allowed_cpus()[:1] and cond.profile == "full"


def test_the_value_grammars() -> None:
    assert parse_cpus("2") == 2 and parse_cpus("0,2-3") == (0, 2, 3) and parse_cpus("3,") == (3,)
    assert parse_cpus("1-1") == (1,)
    for bad in ("", "-1", "3-1", "a", "0,,1"):
        with pytest.raises(ValueError):
            parse_cpus(bad)
    assert parse_size("512M") == 512 << 20 and parse_size("1GiB") == 1 << 30
    assert parse_size(str(64 << 20)) == 64 << 20
    for bad in ("", "1.5G", "12", "5X", "-1M", "64iB"):
        with pytest.raises(ValueError):
            parse_size(bad)


PRINT = "import os\nprint(sorted(os.sched_getaffinity(0)), os.environ.get('OMP_NUM_THREADS'))\n"


def test_host_applies_its_values_and_a_flag_overrides_one(tmp_path: Path) -> None:
    argv = ("--", sys.executable, "-c", PRINT)
    res = harness("watch", "--quiet", "--host", "container-1cpu", *argv, report_root=tmp_path / "a")
    assert res.code == PASS, res.stderr
    first = allowed_cpus()[0]
    assert (res.folder / "output.log").read_text().split("\n")[0] == f"[{first}] 1"
    conditions = res.loaded.conditions
    assert conditions is not None, res.loaded
    assert conditions.profile == "container-1cpu" and conditions.cpus == (first,)
    assert conditions.env == {"OMP_NUM_THREADS": "1"}
    # the flag wins over the profile's cpus; the profile's env stays; the trainer's --env wins
    everything = list(allowed_cpus())
    res = harness(
        "watch", "--quiet", "--host", "container-1cpu", "--cpus", str(len(everything)),
        "--env", "OMP_NUM_THREADS=3", *argv, report_root=tmp_path / "b",
    )  # fmt: skip
    assert res.code == PASS, res.stderr
    assert (res.folder / "output.log").read_text().split("\n")[0] == f"{everything} 3"
    again = res.loaded.conditions
    assert again is not None and again.cpus == tuple(everything)


# ---------------------------------------------------------------- docs against the schema

_KEY = re.compile(r"^\s*#?\s*([a-z_][a-z0-9_]*)\s*=", re.M)


def test_the_hosts_doc_names_every_key_and_no_other() -> None:
    keys = schema_keys(json_schemas()["host"])
    text = (ROOT / "docs" / "hosts.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    shown: set[str] = set()
    for block in blocks:
        shown |= set(_KEY.findall(block))
        shown |= set(re.findall(r"^\s*\[([a-z_]+)\]", block, re.M))
    env_keys = {"OMP_NUM_THREADS"}
    shown_lower = {k for k in shown if k not in env_keys and k.islower()}
    assert keys and sorted(keys - shown_lower) == [], "docs/hosts.md does not show these keys"
    assert sorted(shown_lower - keys) == [], "docs/hosts.md shows keys the schema lacks"
    for name in host_names():
        assert f"`{name}`" in text, f"hosts/{name}.toml has no row in docs/hosts.md"
