"""Variants: stock, the omp-free source transform, user patches, fix refs, build-time
variables, and combinations of them ("omp-free+patch:guards.patch"), applied to a
prepared copy of the source (never to the user's checkout).

Every path a variant brings is confined (harness.contain): a transform writes only inside
the prepared copy (a file named by an absolute or `..` path, or reached through a symlink
that leads out of the copy, is refused, not followed); a transform is named, never given by
path; a `patch:` of a pin's alias is read only from the pin's folder or upstream_pin/; and
every path a patch (or a `ref:` diff) touches is checked before and after `git apply`.

The omp-free transform is data (upstream_pin/fixes/omp-free.toml): which functions, in
which files, and which pragma lines to neutralize. It works on any commit, so bisect and
CI can apply it to history too, and it fails loudly when a function or pragma is absent.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import contain
from harness.config.pin import Pin, pin_dir

# the transform's types and loader live in harness.config.transform (validated at load,
# the name resolved against the fixes folder only); re-exported here for callers
from harness.config.transform import Transform as Transform
from harness.config.transform import TransformTarget as TransformTarget
from harness.config.transform import check_name as check_transform_name
from harness.config.transform import load_transform as load_transform
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.process import tools
from harness.vocab import VariantKind

MARK = "/* [harness omp-free] */ //"


@dataclass(frozen=True)
class Step:
    kind: VariantKind
    arg: str = ""
    # the pin alias this step came from ("" when the user typed it): a path in a pin's
    # alias is confined to the pin's folder, a path the user typed is theirs to name
    alias: str = field(default="", compare=False)

    def label(self) -> str:
        return self.kind if not self.arg else f"{self.kind}:{self.arg}"


@dataclass
class Applied:
    """What a variant changed, for the report."""

    steps: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    build_env: dict[str, str] = field(default_factory=dict)


def parse_variant(spec: str, pin: Pin, _depth: int = 0, _alias: str = "") -> list[Step]:
    """Expand aliases from the pin and split combinations into steps."""
    if _depth > 8:
        raise HarnessError(f"variant alias loop at {spec!r}", USAGE)
    steps: list[Step] = []
    for part in filter(None, (p.strip() for p in spec.split("+"))):
        if part in pin.variants:
            steps += parse_variant(pin.variants[part], pin, _depth + 1, _alias or part)
        elif part == "stock":
            continue
        elif part == VariantKind.OMP_FREE:
            steps.append(Step(VariantKind.OMP_FREE, "omp-free", _alias))
        elif part.startswith("omp-free:"):
            name = part.split(":", 1)[1]
            try:  # a name, not a path: refused here, before anything is prepared
                check_transform_name(name)
            except HarnessError as exc:
                if not _alias:
                    raise
                origin = _variant_origin(part, pin, _alias)
                raise HarnessError(f"{origin}: {exc.message}", exc.exit_code) from exc
            steps.append(Step(VariantKind.OMP_FREE, name, _alias))
        elif part.startswith(("patch:", "ref:", "env:")):
            kind, arg = part.split(":", 1)
            if not arg:
                raise HarnessError(f"variant {part!r} needs a value after ':'", USAGE)
            steps.append(Step(VariantKind(kind), arg, _alias))
        else:
            aliases = ", ".join(sorted(pin.variants)) or "none"
            raise HarnessError(
                f"unknown variant {part!r} (use stock, omp-free, patch:FILE, ref:REF, env:K=V, "
                f"or a '+' combination; aliases of pin {pin.name}: {aliases})",
                USAGE,
            )
    return steps


def _variant_origin(part: str, pin: Pin, alias: str) -> str:
    """Where a variant step was written, for an error: the pin's alias or the command line."""
    if alias:
        return f"{pin.file.name} [variants] {alias} ({part!r})"
    return f"--variant {part!r}"


# ---------------------------------------------------------------- omp-free transform


def _strip_code(text: str) -> str:
    """The text with comments and string/char literals blanked (same length), so that
    braces and names inside them do not confuse the body search."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        two = text[i : i + 2]
        if two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif two == "/*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def function_body(text: str, function: str) -> tuple[int, int] | None:
    """(start, end) offsets of the body braces of `function`'s definition, or None."""
    code = _strip_code(text)
    head = re.compile(rf"\b{re.escape(function)}\s*\(")
    for m in head.finditer(code):
        depth, i = 0, m.end() - 1
        while i < len(code):  # skip the parameter list
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        rest = re.match(r"[^;{()]*\{", code[i:])
        if rest is None:
            continue  # a call or a prototype, not the definition
        start = i + rest.end() - 1
        depth = 0
        for j in range(start, len(code)):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            if depth == 0:
                return start, j + 1
    return None


def _neutralize(text: str, span: tuple[int, int], pragma: re.Pattern[str]) -> tuple[str, list[int]]:
    start, end = span
    lines = text[start:end].split("\n")
    # which lines are pragmas is decided on the code with comments blanked: a pragma inside
    # a /* */ comment is not code, and marking it would close that comment early
    code_lines = _strip_code(text)[start:end].split("\n")
    first_line = text.count("\n", 0, start) + 1
    changed: list[int] = []
    out: list[str] = []
    continuing = False
    for idx, (line, code) in enumerate(zip(lines, code_lines, strict=True)):
        if continuing or pragma.match(code):
            changed.append(first_line + idx)
            out.append(MARK + " " + line)
            continuing = line.rstrip().endswith("\\")
        else:
            out.append(line)
    return text[:start] + "\n".join(out) + text[end:], changed


def apply_transform(tree: Path, transform: Transform) -> list[str]:
    """Neutralize every matching pragma inside each target function; list what changed.
    Each target file is confined to `tree` before it is read and again when written: the
    write goes to the resolved path with O_NOFOLLOW (harness.contain.write_confined)."""
    changes: list[str] = []
    for target in transform.targets:
        found = False
        for rel in target.files:
            what = f"transform {transform.name!r}: {target.function}() files entry"
            path = contain.confined(tree, rel, what=what)
            if not path.is_file():
                continue
            text = contain.read_regular(path, what=what).decode("utf-8", errors="surrogateescape")
            span = function_body(text, target.function)
            if span is None:
                continue
            found = True
            new, lines = _neutralize(text, span, transform.pragma)
            if not lines:
                raise HarnessError(
                    f"{transform.name}: no OpenMP pragma in {target.function}() in {rel}: "
                    "nothing to neutralize (already fixed, or the transform is out of date)",
                    USAGE,
                )
            contain.write_confined(tree, rel, new.encode("utf-8", "surrogateescape"), what=what)
            changes += [f"{rel}:{n} in {target.function}(): pragma neutralized" for n in lines]
            break
        if not found:
            raise HarnessError(
                f"{transform.name}: function {target.function}() not found in "
                f"{', '.join(target.files)}",
                USAGE,
            )
    return changes


# ---------------------------------------------------------------- patches and refs


def apply_patch(tree: Path, patch: Path, origin: str = "") -> list[str]:
    """`git apply` the patch onto `tree`, after checking every path it touches stays in
    the tree (git refuses absolute paths, '..' and writes beyond a symlink itself, as
    tests/test_containment.py shows; the check of our own holds whatever git version runs),
    and after it, that nothing it created (a symlink) leads out of the tree."""
    where = origin or f"patch {patch.name}"
    if not patch.is_file():
        raise HarnessError(f"{where}: patch file not found: {patch}", USAGE)
    argv = ["git", "apply", "--whitespace=nowarn", str(patch)]
    env = outside_any_repo(tree)
    touched = patch_paths(tree, patch, where)
    for rel in touched:
        contain.confined(tree, rel, what=f"{where}: a file it changes")
    check = tools.run_tool([*argv[:2], "--check", *argv[2:]], timeout=60, cwd=tree, env=env)
    if check.error:
        raise HarnessError(f"cannot run git to apply {patch.name}: {check.error}", USAGE)
    if check.returncode != 0:
        first = (check.stderr or check.stdout).strip().splitlines()[:1]
        raise HarnessError(
            f"patch {patch.name} does not apply: {first[0] if first else 'git apply failed'}",
            USAGE,
        )
    done = tools.run_tool(argv, timeout=60, cwd=tree, env=env)
    if done.returncode != 0:
        raise HarnessError(f"patch {patch.name} failed: {done.stderr.strip()}", USAGE)
    for rel in touched:  # a symlink the patch created must not lead out of the tree
        contain.confined(tree, rel, what=f"{where}: a file it created")
    stat = tools.run_tool(["git", "apply", "--stat", str(patch)], timeout=60, cwd=tree, env=env)
    return [f"patch {patch.name}: {line.strip()}" for line in stat.stdout.splitlines() if line]


def patch_paths(tree: Path, patch: Path, where: str) -> list[str]:
    """Every path the patch names (both sides of a rename), as `git apply --numstat -z`
    reads them: records `added TAB deleted TAB path NUL`, or for a rename or copy
    `added TAB deleted TAB NUL old NUL new NUL`. Each is checked on its text first."""
    res = tools.run_tool(
        ["git", "apply", "--numstat", "-z", str(patch)],
        timeout=60,
        cwd=tree,
        env=outside_any_repo(tree),
    )
    if res.error:
        raise HarnessError(f"cannot run git to read {patch.name}: {res.error}", USAGE)
    if res.returncode != 0:
        first = (res.stderr or res.stdout).strip().splitlines()[:1]
        why = first[0] if first else "git apply --numstat failed"
        raise HarnessError(f"patch {patch.name} does not apply: {why}", USAGE)
    paths: list[str] = []
    tokens = res.stdout.split("\0")
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token:
            continue
        fields = token.split("\t", 2)
        if len(fields) != 3:
            raise HarnessError(f"{where}: unexpected git apply output {token!r}", USAGE)
        if fields[2]:
            paths.append(fields[2])
        else:  # a rename or copy: the two paths follow
            paths += tokens[i : i + 2]
            i += 2
    for rel in paths:
        problem = contain.lexical_problem(rel)
        if problem is not None:
            raise contain.refuse(f"{where}: a file it changes", rel, problem)
    return paths


def outside_any_repo(tree: Path) -> dict[str, str]:
    """An environment in which git run in `tree` cannot find a repository above it: `git
    apply` inside a repository applies paths relative to that repository's top instead."""
    return {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.resolve().parent)}


def resolve_patch_path(arg: str, pin: Pin, alias: str = "") -> Path:
    """The patch file of a `patch:` step.

    Typed by the user (`alias` empty): any file they name (it is their explicit input), as
    given, else relative to the pin's folder, else to upstream_pin/ (the shipped fixes).
    From a pin's `[variants]` alias: only inside the pin's folder or upstream_pin/, so a
    pin cannot make the harness read an arbitrary host file."""
    if alias:
        what = f"{pin.file.name} [variants] {alias} (patch:{arg})"
        problem = contain.lexical_problem(arg)
        if problem is not None:
            raise contain.refuse(what, arg, problem)
        for folder in (pin.file.parent, pin_dir()):
            candidate = contain.confined(folder, arg, what=what)
            if candidate.is_file():
                return candidate
        return contain.confined(pin.file.parent, arg, what=what)  # reported as not found
    for candidate in (Path(arg).expanduser(), pin.file.parent / arg, pin_dir() / arg):
        if candidate.is_file():
            return candidate.resolve()
    return Path(arg).expanduser().resolve()  # apply_patch reports it as not found


RefApplier = Callable[[Path, str], list[str]]


def apply_steps(
    tree: Path, steps: list[Step], pin: Pin, apply_ref: RefApplier | None = None
) -> Applied:
    applied = Applied()
    for step in steps:
        applied.steps.append(step.label())
        if step.kind is VariantKind.OMP_FREE:
            applied.changes += apply_transform(tree, load_transform(step.arg))
        elif step.kind is VariantKind.PATCH:
            origin = _variant_origin(step.label(), pin, step.alias)
            patch = resolve_patch_path(step.arg, pin, step.alias)
            applied.changes += apply_patch(tree, patch, origin)
        elif step.kind is VariantKind.ENV:
            key, sep, value = step.arg.partition("=")
            if not sep or not key:
                raise HarnessError(f"variant env:{step.arg} expects env:KEY=VALUE", USAGE)
            applied.build_env[key] = value
            applied.changes.append(f"build environment {key}={value}")
        elif step.kind is VariantKind.REF:
            if apply_ref is None:
                raise HarnessError(
                    f"variant ref:{step.arg} needs a git upstream (pin {pin.name} has none)", USAGE
                )
            applied.changes += apply_ref(tree, step.arg)
    return applied
