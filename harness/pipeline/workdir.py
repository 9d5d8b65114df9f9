"""The trainer's working folder: `workdir/` in its run's report.

Upstream reads ./config and writes ./logs and ./checkpoints, so a pin's trainer ran in the
build tree (`[run] cwd = "tree"`). Runs of one cached build at once (--jobs, compare, a
sweep, CI's workers) then shared one logs/ folder, and a run's checks read the newest
end-of-run log there: another run's, when that one ended in between. Each run now works in a
folder of its own: the tree's entries as links, what the trainer writes (`[run] writes`) its
own (a folder of the tree among them starts empty). The links live while the run is judged
(a Python trainer's frames name files through them), and are removed on every way out, so
the report holds what the run wrote and nothing that leads into the build tree (an artifact
upload follows links). A report folder that cannot hold links (vfat, some network mounts)
runs the trainer in the tree, as before, with a note.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.files import write_failure
from harness.report.model import Report
from harness.vocab import RunCwd

WORKDIR = "workdir"
# what a file system without symbolic links answers symlink(2)
NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})


@contextlib.contextmanager
def linked(report: Report, tree: Path, pin: Pin) -> Iterator[Path]:
    """The trainer's working folder for the block: empty (`cwd = "report"`), or the build
    tree's entries as links but for what the trainer writes."""
    folder = report.artifact(WORKDIR)
    made: list[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if pin.run_cwd is RunCwd.TREE:
            _link(folder, tree, pin.run_writes, made)
    except OSError as exc:
        _unlink(made)
        if exc.errno not in NO_LINKS:  # the disk filled up since the folder was checked
            raise HarnessError(f"cannot create {folder}: {write_failure(exc)}") from None
        report.notes.append(
            f"{folder} cannot hold symbolic links ({write_failure(exc)}): the trainer runs "
            "in the build tree, where runs of one build at once share its logs/"
        )
        folder = tree
    try:
        yield folder
    finally:
        _unlink(made)


def _link(folder: Path, tree: Path, writes: tuple[str, ...], made: list[Path]) -> None:
    for entry in sorted(tree.iterdir()):
        target = folder / entry.name
        if entry.name in writes:  # the run's own, empty: a trainer may not make it itself
            if entry.is_dir():
                target.mkdir(exist_ok=True)
            continue
        target.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
        made.append(target)


def _unlink(made: list[Path]) -> None:
    """Remove the links made, every one of them even when a signal's exception (Ctrl-C,
    the harness's Interrupted) lands on the way: it is raised again once they are gone."""
    pending: BaseException | None = None
    while made:
        try:
            while made:
                with contextlib.suppress(OSError):
                    made[-1].unlink()
                made.pop()
        except BaseException as exc:
            pending = pending or exc
    if pending is not None:
        raise pending
