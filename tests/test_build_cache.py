"""The build cache checks itself (issue 17): each damage a cache entry can suffer, done for
real to a real build of the replica (a truncated or deleted binary, a deleted config
folder, a truncated, garbled or foreign marker), is detected
before use, the entry is rebuilt, and the result says why; a hit on a whole entry stays a
cheap hit. Builds are real (gcc, -O0 to keep each under a few seconds) in a per-module cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.build import BuildResult, build, copy_source, new_scratch_tree
from harness.build.entry import MARKER
from harness.config.pin import Pin, load_pin
from harness.errors import HarnessError
from harness.outcome import USAGE, Kind
from tests.harness_cli import harness, verdict_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.needs_tool("gcc", why="builds the replica for real"),
]

FAST = {"CFLAGS": "-O0"}  # appended by the replica's build.sh: a build in seconds, not ten


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def replica(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], BuildResult]]:
    """`replica()` builds the stock replica for breakout (a cache hit when the entry is whole)."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(cache_dir))
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    pin = load_pin("replica")
    root = pin.source_root
    assert root is not None

    def make() -> BuildResult:
        prepared = new_scratch_tree()
        copy_source(root, prepared)
        return build(prepared, pin, "breakout", {})

    yield make


def _runs(binary: Path) -> bool:
    """The binary loads and runs: `puffer --help` prints its usage (and exits 1, not by a
    signal)."""
    res = subprocess.run([str(binary), "--help"], capture_output=True, timeout=30)
    return res.returncode >= 0 and b"usage: puffer train" in res.stdout + res.stderr


def _truncate_binary(tree: Path) -> None:
    binary = tree / "puffer"
    os.truncate(binary, binary.stat().st_size // 2)
    # the damage is real: the half binary does not run (or exec refuses it: ENOEXEC)
    with contextlib.suppress(OSError):
        assert not _runs(binary)


def _truncate_marker(tree: Path) -> None:
    data = (tree / MARKER).read_bytes()
    (tree / MARKER).write_bytes(data[: len(data) // 2])


def _marker_of_another_key(tree: Path) -> None:
    data = json.loads((tree / MARKER).read_text())
    data["key"] = "0" * 24
    (tree / MARKER).write_text(json.dumps(data))


def _marker_naming_files_outside(tree: Path) -> None:
    # a hostile marker that records files outside the entry: never stat'ed, never hashed
    data = json.loads((tree / MARKER).read_text())
    data["checked"]["/etc/passwd"] = [1, "0" * 64]
    data["sizes"]["../../outside"] = 1
    (tree / MARKER).write_text(json.dumps(data))


def _old_marker(tree: Path) -> None:
    # what the previous harness wrote: no record of the entry's files
    (tree / MARKER).write_text(json.dumps({"key": tree.name.rsplit("-", 1)[1], "built_at": "x"}))


DAMAGES: dict[str, tuple[Callable[[Path], object], str]] = {
    "truncated binary": (_truncate_binary, "puffer is "),
    "deleted binary": (lambda t: (t / "puffer").unlink(), "puffer is missing"),
    "deleted config folder": (lambda t: shutil.rmtree(t / "config"), "config/"),
    "truncated marker": (_truncate_marker, "its marker is unreadable (JSONDecodeError)"),
    "marker is a JSON list": (
        lambda t: (t / MARKER).write_text("[1, 2, 3]"),
        "its marker is a JSON list",
    ),
    "marker is not UTF-8": (
        lambda t: (t / MARKER).write_bytes(b'{"key": "\xff\xfe\x00"}'),
        "its marker is unreadable (UnicodeDecodeError)",
    ),
    "marker of another key": (_marker_of_another_key, "its marker is of another build"),
    "marker names files outside": (_marker_naming_files_outside, "is malformed"),
    "marker of the previous format": (_old_marker, "its marker is of format 1"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_entry_is_detected_and_rebuilt(
    damage: str, replica: Callable[[], BuildResult]
) -> None:
    first = replica()
    assert first.ok, first.first_error
    do, why = DAMAGES[damage]
    do(first.tree)
    second = replica()
    assert second.ok, second.first_error
    assert not second.cache_hit
    assert second.tree == first.tree and second.key == first.key
    assert len(second.notes) == 1, second.notes
    assert why in second.notes[0] and "rebuilt" in second.notes[0], second.notes
    assert _runs(second.tree / "puffer")  # not a SIGSEGV of a half binary
    assert (second.tree / "config" / "breakout.ini").is_file()
    third = replica()  # the rebuilt entry is whole again: a plain hit, nothing to say
    assert (third.ok, third.cache_hit, third.notes) == (True, True, [])


def test_a_damaged_entry_is_set_aside_not_deleted(replica: Callable[[], BuildResult]) -> None:
    """Another harness's trainer may still run from a damaged entry (its cwd): the entry is
    renamed aside, whole, for a day; the rebuild goes where it was."""
    first = replica()
    before = set(first.tree.parent.glob(".damaged-*"))  # the cache is the module's
    _truncate_binary(first.tree)
    second = replica()
    assert second.ok and not second.cache_hit and second.tree == first.tree
    (aside,) = set(first.tree.parent.glob(f".damaged-{first.tree.name}-*")) - before
    assert (aside / "config" / "breakout.ini").is_file() and (aside / MARKER).is_file()


def test_an_unfinished_entry_is_rebuilt_silently(replica: Callable[[], BuildResult]) -> None:
    """No marker: a build that failed or was interrupted, which no run ever used; it is
    deleted and rebuilt without a note (a note would blame a damage that did not happen)."""
    first = replica()
    before = set(first.tree.parent.glob(".damaged-*"))
    (first.tree / MARKER).unlink()
    second = replica()
    assert (second.ok, second.cache_hit, second.notes) == (True, False, [])
    assert set(first.tree.parent.glob(".damaged-*")) == before
    assert _runs(second.tree / "puffer")


def test_a_whole_entry_is_a_hit_with_no_note(replica: Callable[[], BuildResult]) -> None:
    replica()
    hit = replica()
    assert (hit.ok, hit.cache_hit, hit.notes) == (True, True, [])
    marker = json.loads((hit.tree / MARKER).read_text())
    assert marker["key"] == hit.key
    # what the run needs is checked by content: the binary and every env's config files
    assert {"puffer", "config/default.ini", "config/breakout.ini"} <= set(marker["checked"])
    assert "src/puffer.c" in marker["sizes"]


def test_end_to_end_a_truncated_binary_is_rebuilt_and_the_run_gets_its_verdict(
    tmp_path: Path, cache_dir: Path
) -> None:
    """`harness run` after the cached binary was truncated: the normal verdict of the bare
    replica (its missing dashboard key: error-exit, exit 3), not a crash, and the report
    says the entry was rebuilt."""
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache"), **FAST}
    built = harness("build", "breakout", report_root=tmp_path / "b", env=env)
    assert built.code == 0, built.stderr
    (tree,) = (tmp_path / "cache" / "builds").glob("replica-breakout-*/")
    _truncate_binary(tree)
    args = ("run", "breakout", "--env", "REPLICA_CONTEXT=bare", "--timeout", "60")
    res = harness(*args, report_root=tmp_path / "r", env=env)
    report = res.loaded
    assert res.code == 3, res.stdout + res.stderr
    v = verdict_of(report)
    assert v.kind is Kind.ERROR_EXIT, v
    assert "missing key" in v.summary
    assert report.build is not None, report.notes
    assert report.build.cache_hit is False
    assert any("puffer is " in n and "rebuilt" in n for n in report.build.notes)
    assert any("puffer is " in n and "rebuilt" in n for n in report.notes)
    # the note reads back with the report: the notes read are those report.json holds
    assert report.build.notes == res.report["build"]["notes"]


# ------------------------------------------------ declared outputs stay inside the build copy


def _tiny_pin(tmp_path: Path, outputs: list[str], script: str) -> Pin:
    src = tmp_path / "src"
    src.mkdir()
    (src / "build.sh").write_text(script)
    pin = tmp_path / "tiny.toml"
    pin.write_text(
        "schema_version = 1\n"
        'name = "tiny"\nenvs = ["breakout"]\nparser = "puffer5"\n'
        f'[source]\nkind = "path"\npath = "{src}"\n'
        f'[build]\ncommand = "bash build.sh"\ntimeout_s = 30\noutputs = {json.dumps(outputs)}\n'
        '[run]\ncommand = "./out"\n'
    )
    return load_pin(str(pin))


def _build_tiny(pin: Pin) -> BuildResult:
    assert pin.source_root is not None
    prepared = new_scratch_tree()
    copy_source(pin.source_root, prepared)
    return build(prepared, pin, "breakout", {})


@pytest.mark.parametrize("output", ["/bin/sh", "../x", "a/../../x"])
def test_an_output_outside_the_build_copy_is_refused(
    output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    ran = tmp_path / "ran"
    with pytest.raises(HarnessError) as err:  # refused by the pin's schema or by build()
        _build_tiny(_tiny_pin(tmp_path, [output], f"touch {ran}\n"))
    assert err.value.exit_code == USAGE
    assert "build.outputs" in err.value.message or "outputs" in err.value.message
    assert output in err.value.message
    assert not ran.exists()  # refused before anything was built


def test_an_output_that_links_out_of_the_build_copy_is_a_failed_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    res = _build_tiny(_tiny_pin(tmp_path, ["out"], "ln -s /bin/sh out\n"))
    assert not res.ok
    assert res.first_error == "build output out is a link out of the build tree"
    assert not (res.tree / MARKER).exists()  # never a cache entry
