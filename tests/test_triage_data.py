"""What `harness triage` tries, as data: a pin's [triage] table (knobs, known-good refs, host
profiles) and a cause rule's `knobs`. The shipped tables, how `extends` merges them, and each
bad entry as the TOML it is, refused in one line naming the file and the key."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from harness.config.causes import rules_of_files, shipped_rules
from harness.config.pin import TriageKnob, TriageSpec, load_pin, pin_dir
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline.sweep import Knob
from harness.vocab import AxisKind
from tests.harness_cli import harness

REPLICA = (pin_dir() / "replica").resolve()
PIN = f"""schema_version = 1
name = "t"
envs = ["breakout"]

[source]
kind = "path"
path = "{REPLICA}"

[build]
command = "bash build.sh {{env}}"

[run]
command = "./puffer train {{env}} --train.total-timesteps={{steps}}"
"""


def refused(path: Path, text: str) -> str:
    """The one-line usage error loading the pin `text` (written to `path`) gives."""
    path.write_text(text)
    with pytest.raises(HarnessError) as info:
        load_pin(str(path))
    message = info.value.message
    assert info.value.exit_code == USAGE, message
    assert "\n" not in message and message.startswith(f"{path.name}: "), message
    return message


def with_triage(tmp_path: Path, table: str) -> str:
    return refused(tmp_path / "p.toml", f"{PIN}\n[triage]\n{table}\n")


# ---------------------------------------------------------------- the shipped tables


def test_the_replica_pin_lists_the_reports_knobs_and_a_container_host() -> None:
    triage = load_pin("replica").triage
    assert [k.text() for k in triage.knobs] == [
        "--base.cudagraphs=-1",
        "--base.async=1",
        "--vec.num_buffers=1,4",
        "--vec.num_threads=4,16",
    ]
    assert triage.hosts == ("container-1cpu",)
    assert triage.known_good == ()  # a path source has no history


def test_the_replica_trainer_has_every_key_its_knobs_set() -> None:
    """The replica exits 1 on a key its config lacks (`missing key [sec] key`): each knob's
    key must be one of config/default.ini, as the trainer reads it (dashes → underscores)."""
    ini = configparser.ConfigParser()
    ini.read(REPLICA / "config" / "default.ini")
    knobs = [k for k in load_pin("replica").triage.knobs if k.kind is AxisKind.SET]
    assert knobs
    for knob in knobs:
        section, _, key = knob.name.replace("-", "_").partition(".")
        assert ini.has_option(section, key), knob.label


def test_the_pufferlib5_pin_lists_the_reports_knobs_as_it_spelled_them() -> None:
    triage = load_pin("pufferlib-5.0").triage
    assert [k.label for k in triage.knobs] == [
        "--base.cudagraphs",
        "--base.async",
        "--vec.num-buffers",
        "--vec.num-threads",
    ]
    assert triage.knobs[0].values == ("-1",)  # 0 still enables CUDA graphs on 5.0
    assert triage.known_good == ()  # the report names no commit it saw pass
    assert triage.hosts == ("container-1cpu",)


def test_a_pin_without_the_table_has_an_empty_spec(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PIN)
    assert load_pin(str(path)).triage == TriageSpec()


def test_a_triage_knob_is_a_sweep_knob_with_the_same_label() -> None:
    """The engine turns a TriageKnob into harness.pipeline.sweep.Knob field by field: the
    labels (the sweep's column names) must agree."""
    knobs = [
        *load_pin("replica").triage.knobs,
        *load_pin("pufferlib-5.0").triage.knobs,
        *(k for rule in shipped_rules() for k in rule.knobs),
    ]
    kinds = {k.kind for k in knobs}
    assert kinds == {AxisKind.SET, AxisKind.ENV}
    for knob in knobs:
        assert Knob(knob.kind, knob.name, knob.values).label == knob.label


def test_a_triage_knob_is_only_set_or_env() -> None:
    with pytest.raises(ValueError, match="set or an env knob"):
        TriageKnob(AxisKind.HOST, "host", ("container-1cpu",))


# ---------------------------------------------------------------- extends


def fork(tmp_path: Path, extra: str, source: str = "git") -> Path:
    src = (
        f'kind = "git"\nurl = "{tmp_path}"\ncommit = "UNVERIFIED:abc"'
        if source == "git"
        else 'kind = "path"\npath = "elsewhere"'
    )
    path = tmp_path / "my-fork.toml"
    path.write_text(
        f'schema_version = 1\nname = "my-fork"\nextends = "replica"\n\n[source]\n{src}\n\n'
        f"{extra}\n[files]\n"
    )
    return path


def test_extends_inherits_the_triage_table_key_by_key(tmp_path: Path) -> None:
    base = load_pin("replica").triage
    pin = load_pin(str(fork(tmp_path, '[triage]\nknown_good = ["v4.0"]\n')))
    assert pin.triage.known_good == ("v4.0",)
    assert pin.triage.knobs == base.knobs and pin.triage.hosts == base.hosts
    # a pin that sets knobs replaces the parent's list (a list is not merged)
    own = load_pin(str(fork(tmp_path, '[triage]\nknobs = [{ env = "X", values = ["1"] }]\n')))
    assert own.triage.knobs == (TriageKnob(AxisKind.ENV, "X", ("1",)),)
    assert own.triage.hosts == base.hosts


def test_a_bad_triage_entry_in_a_pin_that_extends_names_that_file(tmp_path: Path) -> None:
    path = fork(tmp_path, '[triage]\nhosts = ["gpu-box"]\n')
    message = refused(path, path.read_text())
    assert message.startswith("my-fork.toml: [triage] hosts"), message
    assert "'gpu-box'" in message and "container-1cpu" in message, message


def test_known_good_refs_need_a_git_source_also_when_merged(tmp_path: Path) -> None:
    message = with_triage(tmp_path, 'known_good = ["v4.0"]')
    assert "known_good needs a git source" in message, message
    path = tmp_path / "base.toml"
    path.write_text(
        PIN.replace('kind = "path"', 'kind = "git"\nurl = "u"\ncommit = "UNVERIFIED:a"')
        .replace(f'path = "{REPLICA}"', "")
        .replace('name = "t"', 'name = "base"')
        + '\n[triage]\nknown_good = ["v4.0"]\n'
    )
    load_pin(str(path))  # fine on its own
    child = tmp_path / "child.toml"
    child.write_text(
        f'schema_version = 1\nname = "child"\nextends = "base.toml"\n\n'
        f'[source]\nkind = "path"\npath = "{REPLICA}"\n'
    )
    message = refused(child, child.read_text())
    assert "known_good needs a git source" in message, message


# ---------------------------------------------------------------- bad entries, one line each


@pytest.mark.parametrize(
    ("table", "where", "what"),
    [
        (
            'knobs = [{ set = "vec.num_threads", env = "X", values = ["1"] }]',
            "[triage] knobs",
            "exactly one of set",
        ),
        ('knobs = [{ values = ["1"] }]', "[triage] knobs", "has neither"),
        ('knobs = [{ env = "X", values = [] }]', "values", "at least one value"),
        ('knobs = [{ env = "X" }]', "values", "missing required key 'values'"),
        ('knobs = [{ set = "num_threads", values = ["1"] }]', " set", "section.key"),
        ('knobs = [{ set = "--vec.num_threads", values = ["1"] }]', " set", "without dashes"),
        ('knobs = [{ env = "OMP WAIT", values = ["1"] }]', " env", "environment variable"),
        ('knobs = [{ env = "X", values = ["a,b"] }]', "values", "comma"),
        ('knobs = [{ env = "X", values = ["1", "1"] }]', "values", "given twice"),
        ('knobs = [{ env = "X", values = ["default"] }]', "values", "names the run without"),
        ('knobs = [{ env = "X", values = [1] }]', "values", "list of strings"),
        ('knobs = [{ env = "X", values = ["\\n"] }]', "values", "printable"),
        (
            'knobs = [{ env = "X", values = ["1"] }, { env = "X", values = ["2"] }]',
            "[triage] knobs",
            "a knob is given twice: X",
        ),
        ('knobs = [{ sett = "a.b", values = ["1"] }]', "'sett'", "did you mean 'set'"),
        ('knob = [{ env = "X", values = ["1"] }]', "'knob'", "did you mean 'knobs'"),
        ('hosts = ["gpu-box"]', "[triage] hosts", "no host profile 'gpu-box'"),
        ('hosts = ["../hosts/container-1cpu"]', "[triage] hosts", "not a plain name"),
        ('hosts = "container-1cpu"', "[triage] hosts", "expected a list"),
        ('known_good = ["--upload-pack=x"]', "[triage] known_good", "git ref"),
    ],
)
def test_each_bad_triage_entry_is_one_line_naming_the_file_and_key(
    tmp_path: Path, table: str, where: str, what: str
) -> None:
    message = with_triage(tmp_path, table)
    assert where in message and what in message, message


def test_triage_must_be_a_table(tmp_path: Path) -> None:
    message = refused(tmp_path / "p.toml", f'triage = "all"\n{PIN}')
    assert message.startswith("p.toml: triage: expected a table"), message


# ---------------------------------------------------------------- cause rules' knobs


def test_the_shipped_causes_knobs_load_and_are_honest() -> None:
    by_id = {rule.id: rule for rule in shipped_rules()}
    omp = by_id["openmp-after-fork"].knobs
    assert [k.text() for k in omp] == ["OMP_WAIT_POLICY=active,passive", "OMP_THREAD_LIMIT=1"]
    assert [k.text() for k in by_id["collective-mismatch"].knobs] == [
        "TORCH_DISTRIBUTED_DEBUG=DETAIL"
    ]
    # a rebuild (another compiler or OpenMP runtime) is a variant, never a knob
    knobs = [k for rule in shipped_rules() for k in rule.knobs]
    assert knobs and all(k.name not in ("CC", "CXX") for k in knobs)
    assert all(k.values for k in knobs)


def test_a_bad_cause_knob_is_one_line_naming_the_file_and_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "more.toml"
    path.write_text(
        'schema_version = 1\n\n[[causes]]\nid = "mine"\ndetector = "output"\n'
        'kinds = ["hang"]\nparams = { regex = \'x\' }\nsentence = "s"\n'
        'knobs = [{ set = "a.b", env = "B", values = ["1"] }]\n'
    )
    with pytest.raises(HarnessError) as info:
        rules_of_files([("more.toml", path)])
    message = info.value.message
    assert "\n" not in message and message.startswith("more.toml: cause mine: "), message
    assert "exactly one of set" in message, message


def test_a_pins_own_cause_may_carry_knobs(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        f'{PIN}\n[[causes]]\nid = "mine"\ndetector = "output"\nkinds = ["hang"]\n'
        "params = { regex = 'x' }\nsentence = \"s\"\n"
        'knobs = [{ set = "vec.num_buffers", values = ["1"] }]\n'
    )
    (rule,) = load_pin(str(path)).causes
    assert rule.knobs == (TriageKnob(AxisKind.SET, "vec.num_buffers", ("1",)),)


# ---------------------------------------------------------------- harness pin show


def test_pin_show_prints_the_triage_table(tmp_path: Path) -> None:
    result = harness("pin", "show", "--pin", "replica", report_root=tmp_path, timeout=60)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("  triage:")
    assert lines[start + 1 : start + 7] == [
        "    knob        --base.cudagraphs=-1",
        "    knob        --base.async=1",
        "    knob        --vec.num_buffers=1,4",
        "    knob        --vec.num_threads=4,16",
        "    known_good  -",
        "    hosts       container-1cpu",
    ]


def test_a_cause_rules_doctor_probes_are_the_doctors() -> None:
    """A rule's `doctor` names `harness doctor`'s probes (Explain runs them when the cause
    is on top): every shipped name is one, and openmp-after-fork asks about the fork."""
    from harness.doctor import probe_names

    named = {n for r in shipped_rules() for n in r.doctor}
    assert {"openmp-after-fork", "openmp"} <= named
    assert named <= set(probe_names())


def test_a_doctor_probe_that_does_not_exist_is_the_rules_one_line_error(tmp_path: Path) -> None:
    from harness.triage.explain import doctor_facts

    path = tmp_path / "causes.toml"
    path.write_text(
        'schema_version = 1\n[[causes]]\nid = "x"\ndetector = "output"\nkinds = ["hang"]\n'
        'params = { regex = "boom" }\nsentence = "boom"\ndoctor = ["no-such-probe"]\n'
    )
    (rule,) = rules_of_files([("causes.toml", path)])
    with pytest.raises(HarnessError) as info:
        doctor_facts(rule, 5.0)
    message = info.value.message
    assert info.value.exit_code == USAGE and "\n" not in message
    assert "cause x: doctor: no doctor probe 'no-such-probe' (known: " in message
