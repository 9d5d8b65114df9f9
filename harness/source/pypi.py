"""PyPI sdist sources: download the pinned sdist once (cached), check its sha256 before
anything reads it, unpack it into a scratch tree and apply the pin's [prepare] steps
(data: folders to create, files to remove). Nothing of the package lives in this repo."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from harness import contain
from harness.build import cache_root
from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.outcome import USAGE
from harness.source.verify import Verification, sha256_file
from harness.vocab import SourceKind, SourceStatus

INDEX_URL = "https://pypi.org/simple/{package}/"
NETWORK_TIMEOUT_S = 60.0
MAX_SDIST_BYTES = 512 * 1024 * 1024


def sdist_path(pin: Pin) -> Path:
    """Where the sdist is cached: its file name is the pin's, confined to the cache's
    sdists/ folder (a name like ../../x would write the download anywhere)."""
    folder = cache_root() / "sdists"
    folder.mkdir(parents=True, exist_ok=True)
    name = pin.source.filename
    if "/" in name or name in ("", ".", ".."):
        raise contain.refuse(f"{pin.file.name} [source] filename", name, "not a plain file name")
    return contain.confined(folder, name, what=f"{pin.file.name} [source] filename")


def _sdist_url(pin: Pin) -> str:
    """The pin's own `url`, else the sdist's address from PyPI's simple index (PEP 691)."""
    if pin.source.url:
        return pin.source.url
    url = INDEX_URL.format(package=pin.source.package)
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=NETWORK_TIMEOUT_S) as resp:
            meta = json.load(resp)
    except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as exc:
        raise HarnessError(
            f"cannot read the PyPI index for {pin.source.package}: {exc}", USAGE
        ) from exc
    for entry in meta.get("files", []):
        if entry.get("filename") == pin.source.filename:
            return str(entry["url"])
    raise HarnessError(
        f"PyPI lists no {pin.source.filename} for {pin.source.package}=={pin.source.version}", USAGE
    )


def _download(url: str, dest: Path) -> None:
    part = dest.with_name(dest.name + ".part")
    digest_bytes = 0
    try:
        with (
            urllib.request.urlopen(url, timeout=NETWORK_TIMEOUT_S) as resp,
            open(part, "wb") as out,
        ):
            while block := resp.read(1 << 20):
                digest_bytes += len(block)
                if digest_bytes > MAX_SDIST_BYTES:
                    raise HarnessError(f"{url} is larger than {MAX_SDIST_BYTES} bytes", USAGE)
                out.write(block)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise HarnessError(f"cannot download {url}: {exc}", USAGE) from exc
    part.rename(dest)


def fetch_sdist(pin: Pin) -> Path:
    """The pinned sdist in the cache, downloaded when absent."""
    path = sdist_path(pin)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        _download(_sdist_url(pin), path)
    return path


def verify_sdist(pin: Pin) -> tuple[Verification, Path]:
    """Fetch and hash-check the sdist. A mismatch is drift; an unpinned hash is unverified."""
    path = fetch_sdist(pin)
    actual = sha256_file(path)
    v = Verification(
        SourceStatus.UNCHECKED, f"PyPI {pin.source.package}=={pin.source.version} ({path})"
    )
    v.commit_expected, v.commit_actual = pin.source.sha256, actual
    if not pin.source.sha256:
        v.status = SourceStatus.UNVERIFIED
        v.unverified.append("sha256 (the pin has none)")
    elif actual == pin.source.sha256:
        v.status = SourceStatus.VERIFIED
    else:
        v.status = SourceStatus.DRIFT  # kept: --allow-drift may still use it; deleting re-downloads
        v.notes.append(
            f"sha256 of {pin.source.filename} is {actual}, the pin says {pin.source.sha256} "
            f"(delete {path} to download it again)"
        )
    return v, path


def unpack(pin: Pin, sdist: Path, dest: Path) -> list[str]:
    """Unpack the sdist's single top folder into `dest`, then apply [prepare]."""
    import tarfile  # only a PyPI source needs it (0.08 s off every start)

    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    tops = [p for p in dest.iterdir()]
    if len(tops) == 1 and tops[0].is_dir():
        top = tops[0]
        for child in list(top.iterdir()):
            child.rename(dest / child.name)
        top.rmdir()
    return prepare(pin, dest)


def prepare(pin: Pin, tree: Path) -> list[str]:
    """The pin's [prepare] steps on the unpacked tree, each path confined to it: a
    `remove = ["/"]` or a link out of the sdist must never reach the host."""
    spec = pin.raw.get("prepare", {})
    changes: list[str] = []
    for rel in spec.get("mkdirs", []):
        path = contain.confined(tree, rel, what=f"{pin.file.name} [prepare] mkdirs")
        path.mkdir(parents=True, exist_ok=True)
        changes.append(f"prepare: created empty folder {rel}")
    for rel in spec.get("remove", []):
        what = f"{pin.file.name} [prepare] remove"
        problem = contain.lexical_problem(rel)
        name = Path(rel).name
        if problem is None and name in ("", ".", ".."):
            problem = "it names a folder of the tree, not an entry in it"
        if problem is not None:
            raise contain.refuse(what, rel, problem)
        # the folder is confined; the entry itself is removed as it is (a link is unlinked,
        # never followed: where it leads is not the tree's to remove)
        target = contain.confined(tree, str(Path(rel).parent), what=what) / name
        if not target.is_symlink() and not target.exists():
            raise HarnessError(f"pin {pin.name} [prepare]: {rel} is not in the sdist", USAGE)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
        changes.append(f"prepare: removed {rel}")
    return changes


class PypiSource:
    kind = SourceKind.PYPI

    def __init__(self, pin: Pin) -> None:
        self.pin = pin

    def verify(self, checkout: Path | None = None) -> tuple[Verification, Path]:
        """The hash-checked sdist (`root` is the sdist file); `checkout` does not apply."""
        return verify_sdist(self.pin)

    def export(self, root: Path, dest: Path, commit: str | None = None) -> list[str]:
        if commit is not None:
            raise HarnessError(f"pin {self.pin.name} is a PyPI sdist: it has no commits", USAGE)
        return unpack(self.pin, root, dest)

    def ref_applier(self, root: Path, base: str | None = None) -> None:
        return None  # an sdist has no refs: a `ref:` variant step is refused by apply_steps
