"""The documentation is checked against the code, so that adding a cause, a detector, a stack
tool, a package or a module without its documentation fails here, naming what is missing.

Each check is a function over a root folder (a checkout: harness/, docs/, README.md) that
returns the gaps it finds; the tests call it on this repository, and on a copy with one thing
added behind the docs' back, to show that the check notices and names exactly that thing.

The README's exit-code and verdict tables are checked against harness.outcome in
tests/test_layout.py (test_readme_exit_codes_match_the_registry,
test_readme_verdicts_match_the_registry); not repeated here.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# --- The registries, each read through one accessor -------------------------------------------
# The detector and stack-tool registries are being restructured; these two functions are the
# only places that know their shape, so a change of shape is a change here only.


def _registry_names(registry: object) -> set[str]:
    """Names of a registry: an object with names(), a mapping name → entry, or an iterable of
    entries with a `name` (or of names)."""
    names = getattr(registry, "names", None)
    if callable(names):
        return {str(n) for n in names()}
    if isinstance(registry, Mapping):
        return {str(k) for k in registry}
    assert isinstance(registry, Iterable), f"not a registry: {registry!r}"
    return {str(getattr(entry, "name", entry)) for entry in registry}


def detector_names() -> set[str]:
    """Every detector a cause rule may name (harness.analysis.detectors)."""
    from harness.analysis import detectors

    for attr in ("REGISTRY", "DETECTORS"):
        registry = getattr(detectors, attr, None)
        if registry is not None:
            return _registry_names(registry)
    raise AssertionError("harness.analysis.detectors has neither REGISTRY nor DETECTORS")


def stack_tool_names() -> set[str]:
    """Every stack tool (the sampling registry `TOOLS`, else the vocabulary's StackToolName)."""
    for module in ("harness.sampling.tools", "harness.sampling.stacks", "harness.sampling"):
        try:
            registry = getattr(importlib.import_module(module), "TOOLS", None)
        except ModuleNotFoundError:
            continue
        if registry is not None:
            return _registry_names(registry)
    from harness.vocab import StackToolName

    return {m.value for m in StackToolName}


def sampling_choices() -> dict[str, set[str]]:
    """The choices `harness run` accepts for --native and --python-stacks."""
    from harness.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    found: dict[str, set[str]] = {}
    for action in run._actions:
        for flag in ("--native", "--python-stacks"):
            if flag in action.option_strings and action.choices is not None:
                found[flag] = {str(c) for c in action.choices}
    return found


# --- The checks: functions over a root folder -------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """One thing the docs do not say: `name` is missing from (or unknown to) `where`."""

    name: str
    where: str

    def __str__(self) -> str:
        return f"{self.name}: {self.where}"


README = "README.md"
ARCHITECTURE = "docs/architecture.md"
PIN_SCHEMA = "docs/pin-schema.md"
CAUSES_TOML = "harness/data/causes.toml"
# options whose values are not a stack tool
NOT_A_TOOL = {"auto", "none"}


def _mentions(text: str, name: str) -> bool:
    """`name` as a word of its own: `lock-cycle` is not found in `lock-cycles`."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def _section(text: str, heading: str) -> str:
    """The body under the first heading (any level) that contains `heading`, up to the next
    heading of the same or a higher level; empty when there is none."""
    m = re.search(rf"^(#+) [^\n]*{re.escape(heading)}[^\n]*\n", text, re.MULTILINE)
    if m is None:
        return ""
    level = len(m.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[m.end() :], re.MULTILINE)
    return text[m.end() : m.end() + end.start()] if end else text[m.end() :]


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table of `text`: its header cells and its rows' cells."""
    split = re.compile(r"(?<!\\)\|")
    tables: list[tuple[list[str], list[list[str]]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([c.strip() for c in split.split(line)[1:-1]])
        elif rows:
            tables.append((rows[0], rows[1:]))
            rows = []
    return tables


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def cause_ids(root: Path) -> list[str]:
    """The shipped causes: causes.toml, then causes/*.toml (config.causes reads the same)."""
    first = root / CAUSES_TOML
    files = [first, *sorted((first.parent / "causes").glob("*.toml"))]
    return [str(c["id"]) for f in files for c in tomllib.loads(f.read_text())["causes"]]


def cause_gaps(root: Path) -> list[Gap]:
    """Every cause of causes.toml has its row in the README's causes table (the causes'
    documentation: where each is found and from what), and the table has no other."""
    where = f"{README} causes table (`| id | found on | from |`)"
    readme = (root / README).read_text()
    table = [rows for header, rows in _tables(readme) if header[:1] == ["id"]]
    documented = {row[0].strip("`") for rows in table for row in rows}
    ids = cause_ids(root)
    gaps = [Gap(i, f"not in the {where}") for i in ids if i not in documented]
    gaps += [Gap(i, f"in the {where} but not in {CAUSES_TOML}") for i in documented - set(ids)]
    return gaps


def detector_gaps(root: Path, detectors: Iterable[str]) -> list[Gap]:
    """Every detector is named in causes.toml's header comment and in pin-schema.md's
    `[[causes]]` section: the two places a rule's author looks for what `detector` takes."""
    lines = (root / CAUSES_TOML).read_text().splitlines()
    header = "\n".join(
        ln for ln in lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("#"))]
    )
    pin_causes = _section((root / PIN_SCHEMA).read_text(), "`[[causes]]`")
    gaps = []
    for name in sorted(detectors):
        if not _mentions(header, name):
            gaps.append(Gap(name, f"not in {CAUSES_TOML}'s header comment"))
        if not _mentions(pin_causes, name):
            gaps.append(Gap(name, f"not in {PIN_SCHEMA}'s [[causes]] section"))
    return gaps


def stack_tool_gaps(root: Path, tools: Iterable[str]) -> list[Gap]:
    readme = (root / README).read_text()
    return [Gap(t, f"not in {README}") for t in sorted(tools) if not _mentions(readme, t)]


def choice_gaps(root: Path, choices: Mapping[str, set[str]], tools: set[str]) -> list[Gap]:
    """The README's `--native a|b|c` and `--python-stacks a|b` are what the CLI accepts, and
    their tools (all but auto/none) are the stack-tool registry's names."""
    readme = (root / README).read_text()
    gaps: list[Gap] = []
    listed: set[str] = set()
    for flag, accepted in sorted(choices.items()):
        m = re.search(rf"`{re.escape(flag)} ([\w|-]+)`", readme)
        written = set(m.group(1).split("|")) if m else set()
        listed |= written
        gaps += [Gap(c, f"{flag} accepts it; not in {README}") for c in sorted(accepted - written)]
        gaps += [Gap(c, f"{flag} in {README}; not accepted") for c in sorted(written - accepted)]
    named = listed - NOT_A_TOOL
    gaps += [Gap(t, f"a stack tool; no {README} choice") for t in sorted(tools - named)]
    gaps += [Gap(t, f"a {README} choice; not a stack tool") for t in sorted(named - tools)]
    return gaps


def _modules(package: Path, prefix: str = "") -> set[str]:
    """A package's parts: `x.py` for a module, `sub/` for a subpackage and `sub/y.py` for
    each module of it, at any depth (`__init__.py` is the package itself)."""
    parts: set[str] = set()
    for p in package.iterdir():
        if p.suffix == ".py" and p.name != "__init__.py":
            parts.add(f"{prefix}{p.name}")
        elif p.is_dir() and (p / "__init__.py").is_file():
            parts.add(f"{prefix}{p.name}/")
            parts |= _modules(p, f"{prefix}{p.name}/")
    return parts


def tree_parts(root: Path) -> dict[str, set[str]]:
    """harness/ as the architecture table names it: `pkg/` → its parts (`_modules`),
    `module.py` → nothing. `__init__`/`__main__` are the package's own files, not parts."""
    parts: dict[str, set[str]] = {}
    for path in sorted((root / "harness").iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            parts[f"{path.name}/"] = _modules(path)
        elif path.suffix == ".py" and not path.name.startswith("__"):
            parts[path.name] = set()
    return parts


def _short(name: str) -> str:
    """How a row may name a part: `html_page` for `html_page.py`, and a subpackage's module
    by its own name (`registry`) or its path (`detectors/registry`)."""
    return re.sub(r"(\.py|/)$", "", name).rsplit("/", 1)[-1]


def package_table(root: Path) -> dict[str, set[str]]:
    """docs/architecture.md's package table (header `| layer | package | owns |`): each
    backticked `pkg/` or `module.py` of the package cell → the backticked names of its row's
    owns cell, shortened (`_short`)."""
    text = (root / ARCHITECTURE).read_text()
    table: dict[str, set[str]] = {}
    for header, rows in _tables(text):
        if "package" not in header or "owns" not in header:
            continue
        pkg, owns = header.index("package"), header.index("owns")
        for row in rows:
            names = {_short(n) for n in _backticked(row[owns])}
            for part in _backticked(row[pkg]):
                table[part] = table.get(part, set()) | names
    return table


def package_gaps(root: Path) -> list[Gap]:
    """The package table lists exactly the packages and top-level modules of harness/, and
    each package's row names each of its modules."""
    where = f"{ARCHITECTURE} package table"
    tree, table = tree_parts(root), package_table(root)
    gaps = [Gap(p, f"in harness/, not in the {where}") for p in sorted(tree.keys() - table)]
    gaps += [Gap(p, f"in the {where}, not in harness/") for p in sorted(table.keys() - tree)]
    for part in sorted(tree.keys() & table.keys()):
        gaps += [
            Gap(f"{part}{m}", f"not named in its row of the {where}")
            for m in sorted(tree[part])
            if _short(m) not in table[part]
        ]
    return gaps


def how_to_add_gaps(root: Path) -> list[Gap]:
    """The README points to the architecture's "How to add" section, which exists."""
    gaps = []
    if "## How to add" not in (root / ARCHITECTURE).read_text():
        gaps.append(Gap("How to add", f"no such section in {ARCHITECTURE}"))
    if "docs/architecture.md#how-to-add" not in (root / README).read_text():
        gaps.append(Gap("How to add", f"{README} does not link it"))
    return gaps


def _vocab_pages() -> list[tuple[type[StrEnum], str, str]]:
    """Each closed vocabulary that report.json or a command's output shows → the page (and
    heading) where a reader of that output looks its words up."""
    from harness import vocab

    return [
        (vocab.Mechanism, README, "## Verdicts"),
        (vocab.Mechanism, "docs/report-schema.md", "## verdict"),
        (vocab.Trigger, "docs/report-schema.md", "## Top level"),
        (vocab.CheckStatus, "docs/report-schema.md", "## Top level"),
        (vocab.StackToolName, "docs/report-schema.md", "## samples"),
        (vocab.WaitKind, "docs/report-schema.md", "## samples"),
        (vocab.EventKind, "docs/report-schema.md", "## samples"),
        (vocab.Confidence, "docs/report-schema.md", "## verdict"),
        (vocab.BisectStatus, "docs/bisect.md", ""),
        (vocab.BisectRole, "docs/bisect.md", ""),
    ]


def vocab_gaps(root: Path) -> list[Gap]:
    """Every member of each vocabulary of `_vocab_pages` is backticked on its page."""
    gaps = []
    for enum, page, heading in _vocab_pages():
        text = (root / page).read_text()
        body = _section(text, heading.lstrip("# ")) if heading else text
        words = set(_backticked(body))
        gaps += [
            Gap(m.value, f"{enum.__name__}: not backticked in {page} {heading}".rstrip())
            for m in enum
            if m.value not in words
        ]
    return gaps


# --- The tests on this repository -------------------------------------------------------------


def test_every_cause_is_documented() -> None:
    assert len(cause_ids(ROOT)) >= 5  # the reader found the rules
    assert [str(g) for g in cause_gaps(ROOT)] == []


def test_every_detector_is_documented() -> None:
    names = detector_names()
    assert {"output", "frames", "openmp-after-fork"} <= names
    assert [str(g) for g in detector_gaps(ROOT, names)] == []


def test_every_stack_tool_is_in_the_readme() -> None:
    tools = stack_tool_names()
    assert {"gdb", "py-spy"} <= tools
    assert [str(g) for g in stack_tool_gaps(ROOT, tools)] == []


def test_the_readme_sampling_choices_are_the_registry() -> None:
    choices = sampling_choices()
    assert set(choices) == {"--native", "--python-stacks"}
    assert [str(g) for g in choice_gaps(ROOT, choices, stack_tool_names())] == []


def test_the_architecture_table_is_the_tree() -> None:
    table = package_table(ROOT)
    assert {"cli/", "outcome.py", "vocab.py"} <= table.keys()  # the parser found the table
    assert [str(g) for g in package_gaps(ROOT)] == []


def test_the_readme_points_to_how_to_add() -> None:
    assert [str(g) for g in how_to_add_gaps(ROOT)] == []


def test_every_vocabulary_member_is_documented() -> None:
    assert [str(g) for g in vocab_gaps(ROOT)] == []


# --- The same checks on a copy with one thing added behind the docs' back ----------------------


def _new(gaps: list[Gap], before: list[Gap]) -> list[Gap]:
    """The gaps the change made: a gap the repository already has fails its own test above,
    not these."""
    return [g for g in gaps if g not in before]


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """harness/ (with its data files), docs/ and README.md, copied."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=ignore)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy2(ROOT / README, tmp_path / README)
    return tmp_path


def test_a_cause_without_its_docs_is_named(copy: Path) -> None:
    causes = copy / CAUSES_TOML
    causes.write_text(
        causes.read_text()
        + '\n[[causes]]\nid = "fake-cause"\ndetector = "output"\nkinds = ["hang"]\n'
        + 'sentence = "x"\nconfidence = "low"\nremedies = []\n'
    )
    gaps = _new(cause_gaps(copy), cause_gaps(ROOT))
    assert [g.name for g in gaps] == ["fake-cause"], gaps
    assert "README.md causes table" in gaps[0].where


def test_a_cause_row_without_its_rule_is_named(copy: Path) -> None:
    readme = copy / README
    row = "| `dead-worker` |"
    assert row in readme.read_text()
    readme.write_text(readme.read_text().replace(row, "| `gone-cause` |", 1))
    gaps = _new(cause_gaps(copy), cause_gaps(ROOT))
    assert sorted(g.name for g in gaps) == ["dead-worker", "gone-cause"]


def test_a_detector_without_its_docs_is_named() -> None:
    gaps = detector_gaps(ROOT, detector_names() | {"fake-detector"})
    assert sorted(
        (g.name, g.where.split("'")[0]) for g in _new(gaps, detector_gaps(ROOT, detector_names()))
    ) == [
        ("fake-detector", f"not in {PIN_SCHEMA}"),
        ("fake-detector", f"not in {CAUSES_TOML}"),
    ]


def test_a_stack_tool_without_its_docs_is_named() -> None:
    tools = stack_tool_names() | {"fake-stack"}
    base = stack_tool_gaps(ROOT, stack_tool_names())
    assert [g.name for g in _new(stack_tool_gaps(ROOT, tools), base)] == ["fake-stack"]
    # and, were it a --native choice, the README's list of choices lacks it
    choices = sampling_choices()
    base = choice_gaps(ROOT, choices, stack_tool_names())
    choices["--native"] = choices["--native"] | {"fake-stack"}
    gaps = _new(choice_gaps(ROOT, choices, tools), base)
    assert [str(g) for g in gaps] == [
        "fake-stack: --native accepts it; not in README.md",
        "fake-stack: a stack tool; no README.md choice",
    ]


def test_a_package_without_its_row_is_named(copy: Path) -> None:
    (copy / "harness" / "fakepkg").mkdir()
    (copy / "harness" / "fakepkg" / "__init__.py").write_text('"""A package nobody wrote up."""\n')
    gaps = _new(package_gaps(copy), package_gaps(ROOT))
    assert [g.name for g in gaps] == ["fakepkg/"], gaps
    assert "not in the docs/architecture.md package table" in gaps[0].where


def test_a_module_without_its_mention_is_named(copy: Path) -> None:
    (copy / "harness" / "report" / "fakewriter.py").write_text('"""report.fake"""\n')
    (copy / "harness" / "fakemod.py").write_text('"""A top-level module nobody wrote up."""\n')
    sub = copy / "harness" / "report" / "fakesub"
    sub.mkdir()
    (sub / "__init__.py").write_text('"""A subpackage nobody wrote up."""\n')
    (sub / "fakepart.py").write_text('"""Nor its module."""\n')
    gaps = _new(package_gaps(copy), package_gaps(ROOT))
    assert [g.name for g in gaps] == [
        "fakemod.py",
        "report/fakesub/",
        "report/fakesub/fakepart.py",
        "report/fakewriter.py",
    ]


def test_a_row_without_its_package_is_named(copy: Path) -> None:
    shutil.rmtree(copy / "harness" / "doctor")
    gaps = _new(package_gaps(copy), package_gaps(ROOT))
    assert [g.name for g in gaps] == ["doctor/"]


def test_a_vocabulary_word_without_its_docs_is_named(copy: Path) -> None:
    schema = copy / "docs" / "report-schema.md"
    word = "`quiescent` (every thread blocked on the tree"
    assert word in schema.read_text()
    schema.write_text(schema.read_text().replace(word, "`still` (every thread blocked"))
    gaps = _new(vocab_gaps(copy), vocab_gaps(ROOT))
    assert [str(g) for g in gaps] == [
        "quiescent: Trigger: not backticked in docs/report-schema.md ## Top level"
    ]
