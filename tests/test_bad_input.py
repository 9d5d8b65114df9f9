"""Bad input of every kind: one line on stderr, a documented exit code, no traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.config.scenario import load_scenario
from harness.errors import HarnessError
from tests.harness_cli import harness

pytestmark = pytest.mark.timeout(120)


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1 and "Traceback" not in text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "must be a finite number of seconds > 0, got nan"),
        ("inf", "must be a finite number of seconds > 0, got inf"),
        ("-1", "must be a finite number of seconds > 0, got -1"),
        ("0", "must be a finite number of seconds > 0, got 0"),
        ("soon", "not a number of seconds: 'soon'"),
    ],
)
def test_limits_must_be_finite_and_positive(tmp_path: Path, value: str, message: str) -> None:
    res = harness("watch", "--stall", value, "--", "true", report_root=tmp_path)
    assert res.code == 5
    # argparse prints its usage first; the error is the last line
    last = res.stderr.strip().splitlines()[-1]
    assert last == f"harness watch: error: argument --stall: {message}"


def test_mistyped_check_fails_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "s.toml"
    bad.write_text(
        'schema_version = 1\nenv = "breakout"\n[defaults]\nsteps = 1\nstartup_s = 1\n'
        'stall_s = 1\ntimeout_s = 1\n[pin.replica]\n[[checks]]\nkind = "range"\n'
        'key = "epoch"\nmin = "1"\n'
    )
    with pytest.raises(HarnessError, match=r"\[\[checks\]\] #1 min: expected a number"):
        load_scenario(str(bad))
    res = harness("run", "breakout", "--scenario", str(bad), report_root=tmp_path / "r")
    assert res.code == 5 and one_line(res.stderr)


def test_malformed_pin_structure(tmp_path: Path) -> None:
    pin = tmp_path / "p.toml"
    pin.write_text(
        'schema_version = 1\nname = "p"\nenvs = "breakout"\n[source]\nkind = "path"\n'
        'path = "x"\n[build]\ncommand = "true"\n[run]\ncommand = "true"\n'
    )
    res = harness("pin", "show", "--pin", str(pin), report_root=tmp_path)
    assert res.code == 5 and "envs: expected a list of strings" in res.stderr
    pin.write_text(pin.read_text().replace('envs = "breakout"', 'envs = ["b"]\nparser = "x"'))
    res = harness("pin", "show", "--pin", str(pin), report_root=tmp_path)
    assert res.code == 5 and "unknown parser 'x'" in res.stderr and one_line(res.stderr)


def test_fetch_never_touches_a_folder_it_did_not_make(tmp_path: Path) -> None:
    dest = tmp_path / "src"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me")
    res = harness(
        "pin", "fetch", "--pin", "pufferlib-5.0", "--dest", str(dest), report_root=tmp_path
    )
    assert res.code == 5 and "is not a git checkout" in res.stderr
    assert (dest / "precious.txt").read_text() == "keep me"


def test_output_with_brackets_reaches_the_summary(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys\nprint('loading [/usr/lib/x.so] and [bold]')\n"
        "print('missing key [train] util/gpu_percent')\nsys.exit(1)\n"
    )
    res = harness("watch", "--", sys.executable, str(script), report_root=tmp_path / "r")
    assert res.code == 3, res.stderr
    assert "missing key [train] util/gpu_percent" in res.stdout
    assert "[/usr/lib/x.so]" in res.stdout
