"""Containment (issue 17, "A fix transform writes outside the build copy"): every path a pin,
a transform, a patch, a variant name or a report brings is confined. Each finding is written
as the hostile input it is: a real transform whose files name a host path, a real symlink
out of a tree, a real patch through a link, a real FIFO, a real pin key naming /etc/shadow.
The files outside stay byte-identical; the refusal is one line, exit USAGE."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from harness import contain, variants
from harness.analysis import checks
from harness.config.pin import load_pin, pin_dir
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.pipeline import evidence
from harness.report.model import Report
from harness.source import verify
from harness.vocab import RunMode
from tests.harness_cli import harness, run_replica

VECENV = """\
static void env_start(Env* e, int n) {
    #pragma omp parallel for
    for (int i = 0; i < n; i++) reset(&e[i]);
}
void* vec_thread_main(void* arg) {
    #pragma omp parallel for
    for (int i = 0; i < 4; i++) step(i);
}
"""


def _one_line(exc: pytest.ExceptionInfo[HarnessError]) -> str:
    message = exc.value.message
    assert exc.value.exit_code == USAGE
    assert "\n" not in message, message
    return message


def _outside(tmp_path: Path) -> Path:
    """A victim file outside every tree of the test, with the text the transform targets."""
    victim = tmp_path / "home" / "user" / "vecenv.h"
    victim.parent.mkdir(parents=True)
    victim.write_text(VECENV)
    return victim


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "build" / "tree"
    (tree / "src").mkdir(parents=True)
    return tree


def _transform(*files: str) -> variants.Transform:
    """A transform built in code: the use-time defence must hold whatever the loader let in."""
    return variants.Transform(
        name="evil",
        description="",
        pragma=re.compile(r"^\s*#\s*pragma\s+omp\b"),
        targets=(variants.TransformTarget("env_start", files),),
    )


# ---------------------------------------------------------------- contain.py itself


def test_confined_refuses_absolute_and_escaping_paths(tmp_path: Path) -> None:
    for rel, why in [
        ("/etc/passwd", "absolute"),
        ("../x", "'..' climbs out"),
        ("a/../../x", "'..' climbs out"),
        ("a/b/../../../x", "'..' climbs out"),
        ("", "empty"),
        ("a\0b", "NUL"),
    ]:
        with pytest.raises(HarnessError) as exc:
            contain.confined(tmp_path, rel, what="pin.toml [files]")
        message = _one_line(exc)
        assert message.startswith("pin.toml [files]: path ") and why in message, message
    # '..' that stays inside is a path like any other
    assert contain.confined(tmp_path, "a/../b", what="x") == tmp_path.resolve() / "b"


def test_confined_follows_links_and_judges_where_they_end(tmp_path: Path) -> None:
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "inc").mkdir(parents=True)
    out.mkdir()
    (out / "secret").write_text("s")
    (root / "inc" / "real.h").write_text("h")
    (root / "inside.h").symlink_to("inc/real.h")  # stays inside: allowed
    (root / "hop1").symlink_to("hop2")  # a chain of links inside that ends outside
    (root / "hop2").symlink_to(out / "secret")
    (root / "dir").symlink_to(out)  # a folder link out: anything below it is outside
    (root / "loop").symlink_to("loop")
    assert contain.confined(root, "inside.h", what="x") == (root / "inc" / "real.h").resolve()
    assert contain.confined(root, "new/file.h", what="x") == root.resolve() / "new" / "file.h"
    for rel in ("hop1", "dir/secret", "dir/not-yet", "dir/../out/secret"):
        with pytest.raises(HarnessError) as exc:
            contain.confined(root, rel, what="t")
        assert "leads out of" in _one_line(exc) or "climbs out" in _one_line(exc)
    with pytest.raises(HarnessError) as exc:
        contain.confined(root, "loop", what="t")
    assert "cannot be resolved" in _one_line(exc)
    assert contain.is_inside(root, "inside.h") and not contain.is_inside(root, "hop1")


def test_reads_and_writes_take_regular_files_only(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    (tmp_path / "target").write_text("t")
    done: list[bool] = []

    def attempts() -> None:  # a FIFO with no writer (reader) would block a plain open
        for path in (fifo, Path("/dev/zero"), link):
            with pytest.raises(HarnessError):
                contain.read_regular(path, what="t")
        with pytest.raises(HarnessError):
            contain.write_confined(tmp_path, "fifo", b"x", what="t")
        done.append(True)

    worker = threading.Thread(target=attempts, daemon=True)
    worker.start()
    worker.join(10)
    assert done == [True], "a read or write of a FIFO blocked"
    with pytest.raises(HarnessError, match="larger than 0 bytes"):
        contain.read_regular(tmp_path / "target", what="t", limit=0)
    assert contain.read_regular(tmp_path / "target", what="t") == b"t"
    contain.write_confined(tmp_path, "new.txt", b"new", what="t")
    assert (tmp_path / "new.txt").read_bytes() == b"new"


# ---------------------------------------------------------------- transforms


def test_transform_files_naming_host_paths_are_refused(tmp_path: Path) -> None:
    victim = _outside(tmp_path)
    tree = _tree(tmp_path)
    (tree / "src" / "vecenv.h").write_text(VECENV)
    climbing = os.path.relpath(victim, tree)  # ../../home/user/vecenv.h
    assert climbing.startswith("../")
    for rel in (str(victim), climbing):
        with pytest.raises(HarnessError) as exc:
            variants.apply_transform(tree, _transform(rel, "src/vecenv.h"))
        message = _one_line(exc)
        assert "transform 'evil'" in message and "env_start()" in message and rel in message
        assert victim.read_text() == VECENV  # byte-identical
    assert (tree / "src" / "vecenv.h").read_text() == VECENV


def test_symlink_in_the_tree_pointing_out_is_refused_not_followed(tmp_path: Path) -> None:
    """A user checkout containing src/vecenv.h -> /home/user/x, copied as a link."""
    victim = _outside(tmp_path)
    tree = _tree(tmp_path)
    (tree / "src" / "vecenv.h").symlink_to(victim)
    with pytest.raises(HarnessError) as exc:
        variants.apply_transform(tree, variants.load_transform("omp-free"))
    assert "leads out of" in _one_line(exc) and "src/vecenv.h" in _one_line(exc)
    assert victim.read_text() == VECENV


def test_a_link_that_stays_inside_the_tree_is_transformed(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "real.h").write_text(VECENV)
    (tree / "src" / "vecenv.h").symlink_to("../real.h")
    changes = variants.apply_transform(tree, variants.load_transform("omp-free"))
    assert len(changes) == 2 and variants.MARK in (tree / "real.h").read_text()


@pytest.mark.parametrize("name", ["../../../../tmp/evil", "/tmp/evil", ".hidden", "a/b", "x\\y"])
def test_transform_names_are_names_not_paths(tmp_path: Path, name: str) -> None:
    pin = load_pin("replica")
    with pytest.raises(HarnessError) as exc:
        variants.parse_variant(f"omp-free:{name}", pin)
    assert "not a path" in _one_line(exc)
    with pytest.raises(HarnessError):
        variants.load_transform(name)
    # the same name in a pin's alias names the pin file and the alias
    aliased = dataclasses.replace(pin, variants={"sneaky": f"omp-free:{name}"})
    with pytest.raises(HarnessError) as exc:
        variants.parse_variant("sneaky", aliased)
    assert "replica.toml [variants] sneaky" in _one_line(exc)


def test_cli_variant_path_escape_is_a_usage_error_and_nothing_is_built(tmp_path: Path) -> None:
    evil = tmp_path / "evil.toml"  # a real transform that would rewrite a host file
    victim = _outside(tmp_path)
    evil.write_text(f'name = "evil"\n[[targets]]\nfunction = "env_start"\nfiles = ["{victim}"]\n')
    climb = os.path.relpath(evil.with_suffix(""), pin_dir() / "fixes")
    cache = tmp_path / "cache"
    res = run_replica(
        tmp_path / "r", {"HARNESS_CACHE_DIR": str(cache)}, "--variant", f"omp-free:{climb}"
    )
    assert res.code == USAGE, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "not a path" in res.stderr and climb in res.stderr
    assert victim.read_text() == VECENV
    built = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
    assert built == [], built  # no scratch tree, no build


# ---------------------------------------------------------------- patches


def _apply(tree: Path, text: str, tmp_path: Path) -> pytest.ExceptionInfo[HarnessError]:
    patch = tmp_path / "hostile.patch"
    patch.write_text(text)
    with pytest.raises(HarnessError) as exc:
        variants.apply_patch(tree, patch)
    return exc


def _git_check(tree: Path, text: str, tmp_path: Path) -> int:
    """What git itself says of the patch (without our check), for the record."""
    patch = tmp_path / "plain.patch"
    patch.write_text(text)
    return subprocess.run(
        ["git", "apply", "--check", str(patch)],
        cwd=tree,
        env=variants.outside_any_repo(tree),
        capture_output=True,
        check=False,
    ).returncode


UP_AND_OUT = """\
diff --git a/../outside/x b/../outside/x
--- a/../outside/x
+++ b/../outside/x
@@ -1 +1 @@
-secret
+pwned
"""
THROUGH_LINK = """\
diff --git a/src/link/x b/src/link/x
--- a/src/link/x
+++ b/src/link/x
@@ -1 +1 @@
-secret
+pwned
"""
ABSOLUTE = """\
diff --git a//OUT/y b//OUT/y
new file mode 100644
--- /dev/null
+++ b//OUT/y
@@ -0,0 +1 @@
+pwned
"""
NEW_LINK_OUT = """\
diff --git a/src/door b/src/door
new file mode 120000
--- /dev/null
+++ b/src/door
@@ -0,0 +1 @@
+OUT
\\ No newline at end of file
"""


def test_patches_that_write_outside_the_tree_are_refused(tmp_path: Path) -> None:
    base = tmp_path / "w"
    tree, out = base / "tree", base / "outside"
    (tree / "src").mkdir(parents=True)
    out.mkdir()
    (out / "x").write_text("secret\n")
    (tree / "src" / "link").symlink_to(out)
    absolute = ABSOLUTE.replace("/OUT", str(out))
    link_out = NEW_LINK_OUT.replace("OUT", str(out))
    # git refuses the first three itself (invalid path, beyond a symbolic link); it would
    # apply the fourth (a new link out of the tree): our own check stands for all four
    assert [_git_check(tree, t, tmp_path) for t in (UP_AND_OUT, THROUGH_LINK, absolute)] != [
        0,
        0,
        0,
    ]
    assert _git_check(tree, link_out, tmp_path) == 0
    for text, why in [
        (UP_AND_OUT, "'..' climbs out"),
        (THROUGH_LINK, "leads out of"),
        (absolute, "absolute"),
        (link_out, "leads out of"),
    ]:
        message = _one_line(_apply(tree, text, tmp_path))
        assert "patch hostile.patch" in message and why in message, message
        assert (out / "x").read_text() == "secret\n"
        assert sorted(p.name for p in out.iterdir()) == ["x"]


def test_a_pin_alias_patch_is_read_only_from_the_pins_folders(tmp_path: Path) -> None:
    secret = tmp_path / "secret.patch"
    secret.write_text("not yours\n")
    pin = load_pin("replica")
    climb = os.path.relpath(secret, pin.file.parent)
    for arg in (str(secret), climb):
        aliased = dataclasses.replace(pin, variants={"sneaky": f"patch:{arg}"})
        [step] = variants.parse_variant("sneaky", aliased)
        with pytest.raises(HarnessError) as exc:
            variants.resolve_patch_path(step.arg, aliased, step.alias)
        message = _one_line(exc)
        assert "replica.toml [variants] sneaky" in message and arg in message
    # the shipped alias still resolves, and a path the user types is theirs to name
    [_, patch_step] = variants.parse_variant("fixed", pin)
    shipped = variants.resolve_patch_path(patch_step.arg, pin, patch_step.alias)
    assert shipped == (pin_dir() / "fixes" / "replica-guards.patch").resolve()
    assert variants.resolve_patch_path(str(secret), pin) == secret.resolve()


# ---------------------------------------------------------------- pin [files], config files


def _replica_copy(tmp_path: Path) -> Path:
    src = tmp_path / "replica-src"
    shutil.copytree(
        pin_dir() / "replica", src, ignore=shutil.ignore_patterns("puffer", "logs", "checkpoints")
    )
    text = (pin_dir() / "replica.toml").read_text().replace('path = "replica"', f'path = "{src}"')
    pin = tmp_path / "replica.toml"
    pin.write_text(text)
    return pin


def test_pin_verify_refuses_a_files_key_outside_the_tree(tmp_path: Path) -> None:
    pin_file = _replica_copy(tmp_path)
    pin_file.write_text(pin_file.read_text() + '"/etc/shadow" = "UNVERIFIED"\n')
    res = harness("pin", "verify", "--pin", str(pin_file), report_root=tmp_path)
    assert res.code == USAGE, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "replica.toml" in res.stderr and "/etc/shadow" in res.stderr
    assert not re.search(r"[0-9a-f]{64}", res.stdout + res.stderr)  # no hash printed


def test_check_files_refuses_keys_and_links_out_for_a_pin_built_in_code(tmp_path: Path) -> None:
    pin = load_pin(str(_replica_copy(tmp_path)))
    root = pin.source_root
    assert root is not None
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    (root / "src" / "out.h").symlink_to(outside)
    os.mkfifo(root / "src" / "pipe.h")
    for key in ("/etc/shadow", "../../x", "src/out.h"):
        hostile = dataclasses.replace(pin, files={key: "UNVERIFIED"})
        with pytest.raises(HarnessError) as exc:
            verify.check_files(hostile, root)
        message = _one_line(exc)
        assert message.startswith("replica.toml [files]: path ") and key in message
    # a FIFO in the tree is not read (it would block): it reads as missing
    [check] = verify.check_files(dataclasses.replace(pin, files={"src/pipe.h": "0" * 64}), root)
    assert check.actual is None


def test_config_files_and_evidence_stay_in_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "config").mkdir(parents=True)
    (tree / "config" / "ok.ini").write_text("[train]\nx = 1\n")
    (tree / "config" / "passwd.ini").symlink_to("/etc/passwd")
    report = Report(run_id="t", directory=tmp_path / "report", harness_argv=[], mode=RunMode.RUN)
    report.directory.mkdir()
    log = tmp_path / "build.log"
    log.write_text("built\n")
    evidence.save_build_evidence(
        report, tree, log, ["config/ok.ini", "config/passwd.ini", "../../etc/passwd"], "breakout"
    )
    assert "config:config/ok.ini" in report.evidence
    assert not any("passwd" in k for k in report.evidence), report.evidence
    kept = [p for p in report.directory.rglob("*") if p.is_file()]
    assert kept and not any("root:" in p.read_text(errors="replace") for p in kept)
    assert sum("not kept" in n for n in report.notes) == 2, report.notes
    # the checks' config reader refuses the same entries, with the entry named
    for entry in ("config/passwd.ini", "/etc/passwd", "../{env}.ini"):
        with pytest.raises(HarnessError) as exc:
            checks.config_for(None, tree, "breakout", [], [entry])
        assert f"config_files entry {entry!r}" in _one_line(exc)
    config, _ = checks.config_for(None, tree, "breakout", [], ["config/ok.ini"])
    assert config == {"train": {"x": "1"}}


# ---------------------------------------------------------------- the probe header


def test_probe_header_and_includes_stay_in_the_tree(tmp_path: Path) -> None:
    from harness.analysis import probe

    pin = load_pin("replica")
    shipped = pin.raw["probe"]
    assert isinstance(shipped, dict)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "env.h").symlink_to("/etc/passwd")
    cases: list[tuple[dict[str, object], str]] = [
        ({"header": "/etc/passwd"}, "/etc/passwd"),
        ({"header": "../../{env}.h"}, "../../breakout.h"),
        ({"header": "env.h"}, "env.h"),
        ({"include": ["/usr/include"]}, "/usr/include"),
    ]
    for table, bad in cases:
        hostile = dataclasses.replace(pin, raw={**pin.raw, "probe": {**shipped, **table}})
        with pytest.raises(HarnessError) as exc:
            probe.compile_driver(hostile, tree, "breakout", tmp_path)
        message = _one_line(exc)
        assert "replica.toml [probe]" in message and bad in message, message
    assert not (tmp_path / "probe.c").exists()  # refused before anything was written


# ---------------------------------------------------------------- the user's checkout


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every entry of a working tree (not .git): a file's bytes, a link's target."""
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            out[rel] = b"-> " + os.fsencode(os.readlink(path))
        elif path.is_file():
            out[rel] = path.read_bytes()
    return out


def test_the_users_checkout_is_never_modified(tmp_path: Path) -> None:
    """A git checkout whose src/vecenv.h is a link to a file elsewhere in the user's home,
    and a fix branch that adds a link out of the tree: the transform, a patch through the
    link and the ref are each refused; the checkout and the home file stay byte-identical."""
    from tests import gitrepo

    history = gitrepo.make_history(tmp_path / "h", [])
    repo = history.root
    home = tmp_path / "home"
    home.mkdir()
    victim = home / "vecenv.h"
    shutil.move(repo / "src" / "vecenv.h", victim)
    (repo / "src" / "vecenv.h").symlink_to(victim)
    gitrepo.git(repo, "add", "-A")
    gitrepo.git(repo, "commit", "--quiet", "-m", "vecenv.h lives in my home")
    tip = gitrepo.git(repo, "rev-parse", "HEAD").strip()
    gitrepo.git(repo, "checkout", "--quiet", "-b", "evil")
    (repo / "src" / "door").symlink_to(home)
    gitrepo.git(repo, "add", "-A")
    gitrepo.git(repo, "commit", "--quiet", "-m", "a door out")
    gitrepo.git(repo, "checkout", "--quiet", "main")
    gitrepo.write_pin(history.pin, repo, tip)
    patch = tmp_path / "edit.patch"
    patch.write_text(
        subprocess.run(
            ["git", "diff", "--no-index", str(victim), "-"],
            input="// edited\n" + victim.read_text(),
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.replace(f"a{victim}", "a/src/vecenv.h")
        .replace("b/-", "b/src/vecenv.h")
    )
    before, home_before = _snapshot(repo), _snapshot(home)
    assert "src/vecenv.h" in before and before["src/vecenv.h"].startswith(b"-> ")
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    common = ("--pin", str(history.pin), "--scenario", str(history.scenario))
    for n, (variant, why) in enumerate(
        [
            ("omp-free", "leads out of"),
            (f"patch:{patch}", "leads out of"),
            ("ref:evil", "leads out of"),
        ]
    ):
        res = harness(
            "run",
            "breakout",
            *common,
            "--checkout",
            str(repo),
            "--variant",
            variant,
            report_root=tmp_path / f"r{n}",
            env=env,
        )
        assert res.code == USAGE, (variant, res.stdout, res.stderr)
        assert why in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert _snapshot(repo) == before and _snapshot(home) == home_before, variant
    assert gitrepo.git(repo, "status", "--porcelain") == ""


def test_pin_names_and_prepare_steps_stay_in_their_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.source import git, pypi

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    pin = load_pin("replica")
    with pytest.raises(HarnessError) as exc:
        git.managed_checkout(dataclasses.replace(pin, name="../../evil"))
    assert "replica.toml name" in _one_line(exc)
    tree = tmp_path / "sdist"
    (tree / "pkg").mkdir(parents=True)
    keep = tmp_path / "keep"
    keep.mkdir()
    (tree / "pkg" / "door").symlink_to(keep)
    for table, why in [
        ({"remove": ["/"]}, "absolute"),
        ({"remove": ["pkg/.."]}, "names a folder"),
        ({"remove": ["pkg/door/x"]}, "leads out of"),
        ({"mkdirs": ["../../made"]}, "climbs out"),
    ]:
        with pytest.raises(HarnessError) as exc:
            pypi.prepare(dataclasses.replace(pin, raw={**pin.raw, "prepare": table}), tree)
        assert "replica.toml [prepare]" in _one_line(exc) and why in _one_line(exc)
    # removing the link itself is fine: where it leads is left alone
    pypi.prepare(
        dataclasses.replace(pin, raw={**pin.raw, "prepare": {"remove": ["pkg/door"]}}), tree
    )
    assert keep.is_dir() and not (tree / "pkg" / "door").is_symlink()
    assert not (tmp_path.parent / "made").exists()
