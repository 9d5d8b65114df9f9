"""The trainer's working folder: `workdir/` in its run's report.

Upstream reads ./config and writes ./logs and ./checkpoints, so a pin's trainer ran in the
build tree (`[run] cwd = "tree"`). Runs of one cached build at once (--jobs, compare, a
sweep, CI's workers) then shared one logs/ folder, and a run's checks read the newest
end-of-run log there: another run's, when that one ended in between. Each run now works in a
folder of its own: the tree's entries as links, what the trainer writes (`[run] writes`) its
own. The links are removed when the trainer has exited, so the report holds what the run
wrote and nothing that leads into the build tree (an artifact upload follows links).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from harness.config.pin import Pin
from harness.errors import HarnessError
from harness.files import write_failure
from harness.report.model import Report
from harness.vocab import RunCwd

WORKDIR = "workdir"


def workdir(report: Report, tree: Path, pin: Pin) -> Path:
    """The trainer's working folder in the run's report: empty (`cwd = "report"`), or the
    build tree's entries as links but for what the trainer writes, which start empty."""
    folder = report.artifact(WORKDIR)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if pin.run_cwd is RunCwd.TREE:
            for entry in sorted(tree.iterdir()):
                link = folder / entry.name
                if entry.name not in pin.run_writes and not link.is_symlink():
                    link.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    except OSError as exc:  # the disk filled up since the report folder was checked
        raise HarnessError(f"cannot create {folder}: {write_failure(exc)}") from None
    return folder


def unlink_tree(folder: Path, tree: Path) -> None:
    """Remove the links `workdir` made into `tree`; what the trainer wrote stays (a link of
    its own too)."""
    with contextlib.suppress(OSError):
        made = {(tree / e.name).resolve() for e in tree.iterdir()}
        for entry in folder.iterdir():
            if entry.is_symlink() and Path(entry.readlink()) in made:
                with contextlib.suppress(OSError):
                    entry.unlink()
