"""Git sources: locate or clone a checkout, verify it against the pin, export a tree
(working tree or a commit) into a scratch folder, and fetch and apply fix refs (`ref:`).

The user's checkout is only ever read: refs are fetched into a harness-owned bare clone
(which borrows the checkout's objects), and builds happen in exported copies.

Repository reads (HEAD, status, history) are in harness.source.gitrepo. Every git call
here goes through harness.process.tools.run_tool (own session, hard timeout, the whole
session killed), as before: the writes (clone, fetch, checkout, the mirror), and the
export and `ref:` reads too (ls-files, archive, merge-base, diff), since a diff may run
programs the repository configures (external diff drivers). Timeouts: GIT_TIMEOUT_S
(120 s) for local commands, NETWORK_TIMEOUT_S for fetch and clone, 30 s for the mirror's
rev-parse.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from harness import contain, variants
from harness.build import cache_root
from harness.config.pin import UNVERIFIED, Pin
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.process import tools
from harness.source.gitrepo import (
    GIT_TIMEOUT_S,
    commit_matches,
    dirty_paths,
    git_result,
    head_commit,
    open_repo,
)
from harness.source.verify import (
    Verification,
    check_files,
    pinned_file,
    sha256_file,
    summarize,
)
from harness.vocab import SourceKind, SourceStatus

NETWORK_TIMEOUT_S = 600.0


def _git(root: Path, *args: str, timeout: float = GIT_TIMEOUT_S) -> str:
    return git_result(root, *args, timeout=timeout).stdout


def _in_cache(folder: str, name: str, pin: Pin) -> Path:
    """cache_root()/folder/name for a name made from the pin's name: confined to that
    folder (a pin named ../../x must not make a clone, or its removal, land elsewhere)."""
    base = cache_root() / folder
    base.mkdir(parents=True, exist_ok=True)
    if "/" in name or name in (".", ".."):
        raise contain.refuse(f"{pin.file.name} name", name, "not a plain name")
    return contain.confined(base, name, what=f"{pin.file.name} name")


def managed_checkout(pin: Pin) -> Path:
    return _in_cache("checkouts", pin.name, pin)


def locate_checkout(pin: Pin, checkout: Path | None) -> Path:
    if pin.source.kind != SourceKind.GIT:
        raise HarnessError(f"pin {pin.name} is not a git source", USAGE)
    if checkout is not None:
        return checkout.expanduser().resolve()
    env = os.environ.get("HARNESS_CHECKOUT")
    if env:
        return Path(env).expanduser().resolve()
    managed = managed_checkout(pin)
    if (managed / ".git").exists():
        return managed
    raise HarnessError(
        f"no checkout for pin {pin.name}: pass --checkout PATH, set HARNESS_CHECKOUT, "
        f"or run `harness pin fetch --pin {pin.name}`",
        USAGE,
    )


def verify_git(pin: Pin, root: Path) -> Verification:
    open_repo(root)
    actual = head_commit(root)
    expected = pin.source.commit
    v = Verification(
        SourceStatus.UNCHECKED,
        f"git {root}",
        commit_expected=expected,
        commit_actual=actual,
        dirty=dirty_paths(root),
        files=check_files(pin, root),
    )
    if expected.startswith(UNVERIFIED):
        v.unverified.append(f"commit (pinned only as {expected}; run `harness pin update`)")
        if not commit_matches(expected, actual):
            v.notes.append(f"HEAD {actual[:12]} does not start with {expected.split(':', 1)[-1]}")
            v.commit_expected = expected.split(":", 1)[-1]
    elif not commit_matches(expected, actual):
        v.notes.append(f"HEAD is {actual}, the pin says {expected}")
    result = summarize(v)
    if expected.startswith(UNVERIFIED) and not commit_matches(expected, actual):
        result.status = SourceStatus.DRIFT
    return result


def export_tree(pin: Pin, root: Path, dest: Path, commit: str | None = None) -> None:
    """Copy the checkout's files into `dest`: its working tree (tracked and untracked but
    not ignored: what verification looked at), or the tree of `commit`."""
    if commit is None:
        listing = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        for rel in filter(None, listing.split("\0")):
            src = root / rel
            if src.is_file():
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target, follow_symlinks=False)
        return
    archive = dest.with_name(dest.name + ".tar")
    try:
        _git(root, "archive", "--format=tar", "-o", str(archive), commit)
        import tarfile  # only an archive source needs it (0.08 s off every start)

        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    finally:
        archive.unlink(missing_ok=True)


def mirror(pin: Pin, root: Path) -> Path:
    """A harness-owned bare clone that borrows the checkout's objects: fetches land here."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    path = _in_cache("repos", f"{pin.name}-{key}.git", pin)  # per checkout: --shared borrows
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        proctree_res = tools.run_tool(
            ["git", "clone", "--bare", "--shared", "--quiet", str(root), str(partial)],
            timeout=GIT_TIMEOUT_S,
        )
        if proctree_res.returncode == 0:
            partial.rename(path)
        if proctree_res.returncode != 0:
            raise HarnessError(
                f"could not make a working clone of {root}: {proctree_res.stderr.strip()}", USAGE
            )
    return path


def resolve_ref(
    pin: Pin, root: Path, ref: str, timeout: float = NETWORK_TIMEOUT_S
) -> tuple[Path, str]:
    """The commit `ref` names: in the checkout's own refs, else fetched from the pin's URL
    (within `timeout`: a triage gives it what its budget has left)."""
    repo = mirror(pin, root)
    _git(repo, "fetch", "--quiet", str(root), "+refs/heads/*:refs/heads/*")
    local = tools.run_tool(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", ref + "^{commit}"], timeout=30
    )
    if local.returncode == 0:
        return repo, local.stdout.strip()
    if not pin.source.url:
        raise HarnessError(f"ref {ref!r} is not in {root} and pin {pin.name} has no url", USAGE)
    res = tools.run_tool(
        ["git", "-C", str(repo), "fetch", "--quiet", pin.source.url, ref], timeout=timeout
    )
    if res.returncode != 0 or res.timed_out:
        why = "timed out" if res.timed_out else (res.stderr.strip().splitlines() or ["failed"])[-1]
        raise HarnessError(f"cannot fetch {ref} from {pin.source.url}: {why}", USAGE)
    return repo, _git(repo, "rev-parse", "FETCH_HEAD").strip()


def ref_applier(pin: Pin, root: Path, base: str | None = None) -> Callable[[Path, str], list[str]]:
    """apply(tree, ref): the diff merge-base(base, ref)..ref applied onto the tree."""

    def apply(tree: Path, ref: str) -> list[str]:
        repo, commit = resolve_ref(pin, root, ref)
        start = base or head_commit(root)
        merge_base = _git(repo, "merge-base", start, commit).strip()
        diff = _git(repo, "diff", "--binary", merge_base, commit)
        if not diff.strip():
            raise HarnessError(
                f"ref {ref} ({commit[:12]}) adds nothing on top of {start[:12]}", USAGE
            )
        patch = tree.with_name(f"{tree.name}.{ref.replace('/', '_')}.patch")
        patch.write_text(diff)
        try:
            variants.apply_patch(tree, patch, f"ref:{ref} ({commit[:12]})")
        finally:
            patch.unlink(missing_ok=True)
        files = [
            ln.split("\t")[-1]
            for ln in _git(repo, "diff", "--numstat", merge_base, commit).splitlines()
        ]
        note = [f"ref {ref} = {commit[:12]} applied onto {start[:12]}: {', '.join(files)}"]
        if merge_base != start:  # the ref branched elsewhere: its diff carries that history
            note.append(
                f"warning: {ref} branched from {merge_base[:12]}, not from {start[:12]}: the "
                "applied diff includes every upstream change between them"
            )
        return note

    return apply


def fetch_checkout(pin: Pin, dest: Path | None = None) -> Path:
    """Clone the pin's repository (branch) and check out the pinned commit when known."""
    if pin.source.kind != SourceKind.GIT or not pin.source.url:
        raise HarnessError(f"pin {pin.name} has no git url to fetch", USAGE)
    target = dest or managed_checkout(pin)
    if (target / ".git").exists():
        _git(target, "fetch", "--quiet", "origin", timeout=NETWORK_TIMEOUT_S)
    else:
        if target.exists() and any(target.iterdir()):
            raise HarnessError(
                f"{target} exists and is not a git checkout: choose another --dest", USAGE
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        argv = ["git", "clone", "--quiet"]
        if pin.source.branch:
            argv += ["--branch", pin.source.branch]
        partial = target.with_name(target.name + ".harness-clone")
        shutil.rmtree(partial, ignore_errors=True)  # ours: a clone that died earlier
        res = tools.run_tool([*argv, pin.source.url, str(partial)], timeout=NETWORK_TIMEOUT_S)
        if res.returncode == 0 and not res.timed_out:
            if target.exists():
                target.rmdir()  # empty, checked above
            partial.rename(target)
        else:
            why = (
                "timed out"
                if res.timed_out
                else (res.stderr.strip().splitlines() or ["failed"])[-1]
            )
            shutil.rmtree(partial, ignore_errors=True)
            raise HarnessError(f"cannot clone {pin.source.url}: {why} (no network access?)", USAGE)
    commit = pin.source.commit.split(":", 1)[-1]
    if commit:
        _git(target, "checkout", "--quiet", "--detach", commit)
    return target


def update_pin_file(pin: Pin, root: Path, commit: str | None) -> list[str]:
    """Rewrite the pin's commit and [files] hashes from a real tree; returns what changed."""
    text = pin.file.read_text()
    changes: list[str] = []
    if commit is not None and pin.source.commit != commit:
        new, n = re.subn(r'(?m)^(\s*commit\s*=\s*)"[^"]*"', rf'\g<1>"{commit}"', text, count=1)
        if n:
            text = new
            changes.append(f"commit {pin.source.commit} → {commit}")
    names = list(pin.files) or []
    if not names:
        raise HarnessError(f"pin {pin.name} lists no [files] to hash", USAGE)
    lines = []
    for rel in names:
        path = pinned_file(pin, root, rel)
        if not path.is_file():
            raise HarnessError(f"{rel} (listed in {pin.file.name}) is missing from {root}", USAGE)
        digest = sha256_file(path, what=f"{pin.file.name} [files] {rel!r}")
        if pin.files[rel] != digest:
            changes.append(f"{rel}: {pin.files[rel][:16]} → {digest[:16]}")
        lines.append(f'"{rel}" = "{digest}"')
    head, sep, tail = text.partition("\n[files]\n")
    if not sep or re.search(r"(?m)^\s*\[", tail):
        raise HarnessError(f"{pin.file.name}: [files] must be the last table to be updated", USAGE)
    comment = "# sha256 of the files that matter; `harness pin update` rewrites this table\n"
    pin.file.write_text(head + sep + comment + "\n".join(lines) + "\n")
    return changes


class GitSource:
    kind = SourceKind.GIT

    def __init__(self, pin: Pin) -> None:
        self.pin = pin

    def verify(self, checkout: Path | None = None) -> tuple[Verification, Path]:
        root = locate_checkout(self.pin, checkout)
        return verify_git(self.pin, root), root

    def export(self, root: Path, dest: Path, commit: str | None = None) -> list[str]:
        export_tree(self.pin, root, dest, commit)
        return []

    def ref_applier(self, root: Path, base: str | None = None) -> Callable[[Path, str], list[str]]:
        return ref_applier(self.pin, root, base=base)
