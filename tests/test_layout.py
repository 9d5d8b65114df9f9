"""The architecture is checked, not only written down: the README's exit codes against the
outcome registry, and import-linter's layer and cycle contracts against a copy of the package
with one bad import injected (so `.ci/run` would fail on it)."""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from harness import filenames, outcome, vocab

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _table(section: str) -> list[list[str]]:
    """The rows of the first table under README's heading `section` (to the next heading)."""
    text = (ROOT / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n#", 1)[0]
    rows = [ln for ln in body.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    split = re.compile(r"(?<!\\)\|")
    return [[c.strip() for c in split.split(row)[1:-1]] for row in rows[1:]]


def test_readme_exit_codes_match_the_registry() -> None:
    rows = _table("Exit codes")
    by_code = {row[0]: row for row in rows}
    for o in outcome.OUTCOMES.values():
        code = "128+N" if o.kind == "interrupted" else str(o.exit_code)
        assert code in by_code, f"README has no exit code {code} ({o.kind})"
        assert f"`{o.kind}`" in by_code[code][1], f"README: exit {code} should name {o.kind}"
    others = {outcome.INTERNAL_ERROR, outcome.BROKEN_PIPE, outcome.USAGE}
    for other in others:
        assert str(other) in by_code, f"README has no exit code {other}"
    registered = {str(o.exit_code) for o in outcome.OUTCOMES.values()} | {str(c) for c in others}
    registered.add("128+N")
    assert set(by_code) <= registered, (
        f"README codes unknown to outcome.py: {set(by_code) - registered}"
    )
    kinds_named = {k for row in rows for k in re.findall(r"`([a-z-]+)`", row[1])}
    assert kinds_named == set(outcome.KINDS)


def test_readme_command_exit_codes_are_the_registry() -> None:
    """README's "Exit codes by command" is outcome.COMMAND_EXITS, row for row; no command
    says anything but a hang with the hang's code."""
    rows = [(r[0].strip("`"), int(r[1]), r[2]) for r in _table("Exit codes by command")]
    registry = [(n, int(c), c.meaning) for n, codes in outcome.COMMAND_EXITS.items() for c in codes]
    assert rows == registry
    assert outcome.HANG not in {code for _, code, _ in registry}


def test_every_command_help_gives_its_exit_codes() -> None:
    """A command's --help is made from the registry: its own codes, or the verdict's."""
    from harness.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, codes in outcome.COMMAND_EXITS.items():
        parser = sub.choices[name.split()[0]]
        assert parser.epilog == outcome.exit_help(name), name
        assert all(f"{int(c)} {c.meaning}" in parser.epilog for c in codes)
    for name in ("run", "watch", "attach"):
        assert sub.choices[name].epilog == outcome.verdict_help()
        assert "2 hang" in outcome.verdict_help()


def test_readme_verdicts_match_the_registry() -> None:
    kinds = [row[0].strip("`") for row in _table("Verdicts")]
    assert sorted(kinds) == sorted(outcome.KINDS)


def _lint_copy(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of harness/ whose `module` got one more import line."""
    shutil.copytree(
        ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "harness" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(120)
def test_lint_imports_passes_on_the_tree(tmp_path: Path) -> None:
    res = _lint_copy(tmp_path, "outcome.py", "# nothing added")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.mark.timeout(120)
def test_lint_imports_fails_on_a_layer_violation(tmp_path: Path) -> None:
    # the base layer reaching up into the command line
    res = _lint_copy(tmp_path, "outcome.py", "import harness.cli  # noqa")
    assert res.returncode != 0
    assert "BROKEN" in res.stdout and "harness.outcome -> harness.cli" in res.stdout


@pytest.mark.timeout(120)
def test_lint_imports_fails_on_a_cycle_inside_a_package(tmp_path: Path) -> None:
    # bisect.steps already imports bisect.model; the reverse closes a cycle between siblings
    res = _lint_copy(tmp_path, "bisect/model.py", "import harness.bisect.steps  # noqa")
    assert res.returncode != 0
    assert "BROKEN" in res.stdout
    assert "No cycles are allowed in harness.bisect" in " ".join(res.stdout.split())


MODULE_LINES = 450  # docs/architecture.md: about 400 lines a module, a few to about 440


def oversized(root: Path, limit: int = MODULE_LINES) -> list[str]:
    """Every module of `root`/harness longer than `limit` lines, with its length: one that
    grew past it is split by idea (docs/architecture.md), not let grow."""
    found = []
    for path in sorted((root / "harness").rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > limit:
            found.append(f"{path.relative_to(root)}: {n} lines (at most {limit})")
    return found


def test_no_module_is_over_the_size_limit() -> None:
    assert len(list((ROOT / "harness").rglob("*.py"))) > 100  # the walk sees the package
    assert oversized(ROOT) == []


def test_the_size_check_names_a_module_over_the_limit(tmp_path: Path) -> None:
    """A module of 451 lines is named, with its length; one of exactly 450 is not."""
    package = tmp_path / "harness" / "pkg"
    package.mkdir(parents=True)
    (package / "long.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    (package / "fits.py").write_text("x = 1\n" * MODULE_LINES)
    assert oversized(tmp_path) == [f"harness/pkg/long.py: {MODULE_LINES + 1} lines (at most 450)"]


@functools.cache
def parsed(root: Path) -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of `root`/harness, parsed once for the checks below: its path relative
    to `root`, its tree."""
    return tuple(
        (path.relative_to(root), ast.parse(path.read_text()))
        for path in sorted((root / "harness").rglob("*.py"))
    )


def nodes(root: Path) -> Iterator[tuple[Path, ast.AST]]:
    """Every node of every module of `root`/harness, with its module's relative path."""
    for where, tree in parsed(root):
        for node in ast.walk(tree):
            yield where, node


def test_no_module_imports_another_modules_private_names() -> None:
    """What one module uses of another is public: `from harness.x import _name` is refused
    anywhere in harness/ (the dashboard formats and the NVML readers once did)."""
    assert len(parsed(ROOT)) > 100
    found = []
    for where, node in nodes(ROOT):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            names = [a.name for a in node.names if a.name.startswith("_")]
            private = [n for n in names if not (n.startswith("__") and n.endswith("__"))]
            found += [f"{where}: {name} from {node.module}" for name in private]
    assert found == []


def vocabulary_fields(root: Path) -> dict[str, set[str]]:
    """The fields (of dataclasses, models, protocols) typed with a closed vocabulary (a
    StrEnum of harness/vocab.py, or outcome's verdict `Kind`), by name, with the words of
    the vocabularies that type a field of that name."""
    enums = {n: v for n, v in vars(vocab).items() if isinstance(v, type) and issubclass(v, StrEnum)}
    enums["Kind"] = outcome.Kind
    word = re.compile(r"\b(" + "|".join(sorted(enums)) + r")\b")
    fields: dict[str, set[str]] = {}
    for _, node in nodes(root):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            for name in word.findall(ast.unparse(item.annotation)):
                words = fields.setdefault(item.target.id, set())
                words |= {m.value for m in enums[name]}
    return fields


def _words(node: ast.expr) -> list[str]:
    """The string literals of an operand: "x", or ("x", "y") / ["x"] / {"x"}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


def literal_vocabulary_comparisons(root: Path) -> list[str]:
    """Every comparison in `root`/harness of a vocabulary-typed field (`r.trigger`,
    `c.status`, `v.kind` …) with a string literal that is one of its words (a field of that
    name is also a psutil status, a path's name …): the member is named instead
    (`r.trigger == Trigger.STALL`), so a renamed or removed word is a type error, not a
    comparison that is silently never true."""
    fields = vocabulary_fields(root)
    found = []
    for path, node in nodes(root):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            typed = [o.attr for o in operands if isinstance(o, ast.Attribute) and o.attr in fields]
            literal = [w for o in operands for w in _words(o)]
            if any(w in fields[t] for t in typed for w in literal):
                where = f"{path}:{node.lineno}"
                found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_no_vocabulary_field_is_compared_to_a_string_literal() -> None:
    fields = vocabulary_fields(ROOT)
    assert {"trigger", "status", "kind", "mechanism", "stage", "mode"} <= fields.keys()
    assert {"stall", "complete", "fail", "hang", "deadlock", "build", "watch"} <= set.union(
        *fields.values()
    )
    assert literal_vocabulary_comparisons(ROOT) == []


def test_the_vocabulary_check_names_a_literal_comparison(tmp_path: Path) -> None:
    """A field typed with a vocabulary compared to its word as a string is named, with its
    place; the same comparison with the member, and a literal compared to a plain string
    field, are not."""
    package = tmp_path / "harness" / "pkg"
    package.mkdir(parents=True)
    (package / "model.py").write_text(
        "from dataclasses import dataclass\n"
        "from harness.vocab import Trigger\n\n"
        "@dataclass\nclass Run:\n    trigger: Trigger | None\n    note: str\n"
    )
    (package / "use.py").write_text(
        "def f(r):\n"
        '    a = r.trigger == "stall"\n'
        '    b = r.trigger not in ("startup", "wall")\n'
        "    c = r.trigger == Trigger.STALL\n"
        '    d = r.note == "stall"\n'
        "    return a, b, c, d\n"
    )
    assert literal_vocabulary_comparisons(tmp_path) == [
        "harness/pkg/use.py:2: r.trigger == 'stall'",
        "harness/pkg/use.py:3: r.trigger not in ('startup', 'wall')",
    ]


def spelt_file_names(root: Path) -> list[str]:
    """Every string literal in `root`/harness, outside harness/filenames.py, that is the
    name of a file the harness writes, or a path or glob pattern ending in one ("*/report.json";
    prose, with its spaces, is not one): the name is read from harness.filenames instead."""
    names = {v for k, v in vars(filenames).items() if k.isupper() and isinstance(v, str)}
    names |= {filenames.table_json(t) for t in vocab.TableKind}
    found = []
    for path, node in nodes(root):
        if path == Path("harness/filenames.py"):
            continue
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        value = node.value
        in_path = not any(c.isspace() for c in value) and value.rpartition("/")[2] in names
        if value in names or ("/" in value and in_path):
            found.append(f"{path}:{node.lineno}: {value}")
    return found


def test_file_names_are_spelt_once() -> None:
    assert spelt_file_names(ROOT) == []


def test_the_file_name_check_names_a_spelt_name(tmp_path: Path) -> None:
    package = tmp_path / "harness" / "pkg"
    package.mkdir(parents=True)
    (package / "use.py").write_text(
        'def f(d):\n    """Reads d/report.json."""\n    return d / "report.json", d / "x.json"\n'
        'def g(d):\n    return d.glob("*/report.json"), d.glob("*/report.json.bak")\n'
    )
    assert spelt_file_names(tmp_path) == [
        "harness/pkg/use.py:3: report.json",
        "harness/pkg/use.py:5: */report.json",
    ]


def test_a_module_runs_whole_on_one_worker(request: pytest.FixtureRequest) -> None:
    """Under xdist (the suite's addopts), a module not marked `spread` is one unit of
    `--dist loadgroup` (conftest.py), so its module-scoped fixtures (a build cache, a bisect,
    a set of runs) are made once. xdist carries the group in the node id; a pytest that keeps
    the id elsewhere makes it drop every group without a word (pytest-dev/pytest-xdist#1386:
    pytest 9.2), and each fixture is made again on every worker its tests land on."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("the suite's grouping is xdist's: run under -n")
    assert request.config.getoption("dist") == "no"  # a worker's view: it runs, not schedules
    assert request.node.nodeid.endswith("@tests/test_layout.py"), request.node.nodeid
