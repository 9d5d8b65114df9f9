"""What a run copies into its report folder (evidence/) so that `harness check` on the
report reads only the folder, on any machine, forever (docs/report-schema.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness import contain
from harness.analysis import endlogs
from harness.filenames import BUILD_LOG
from harness.report import store
from harness.report.model import EVIDENCE_DIR, Report

BUILD_LOG_TAIL = 64 * 1024  # the end of the build log kept in the report


ENDLOG_STEM = "end-of-run"


def inside(root: Path, rel: str) -> bool:
    """`rel` names a file under `root`: not absolute, no '..' out of it, no symlink that
    leads out of it (a config path like ../x.ini, or a config file that is a link to
    /etc/passwd, would not)."""
    return contain.is_inside(root, rel)


def _regular_in(root: Path, path: Path) -> str | None:
    """Why `path` (a file the trainer left under `root`) is not copied, or None: the copy
    follows no link out of `root` and reads only a regular file (a FIFO, or a link to
    /dev/zero, would block or never end)."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return f"{path} is not under {root}"
    if not contain.is_inside(root, rel):
        return f"{path} leads out of {root}"
    if path.exists() and not path.resolve().is_file():
        return f"{path} is not a regular file"
    return None


def save_build_evidence(
    report: Report, tree: Path, log_path: Path, config_files: Sequence[str], env: str
) -> None:
    """The build log's tail and the config files the checks read, from the build tree."""
    store.copy_evidence(report, "build_log", log_path, BUILD_LOG, tail_bytes=BUILD_LOG_TAIL)
    for template in config_files:
        rel = template.format(env=env)
        if not inside(tree, rel):
            report.notes.append(f"config file {rel} is outside the build tree: not kept")
            continue
        why = _regular_in(tree, tree / rel)
        if why is not None:
            report.notes.append(f"config file {rel}: {why}: not kept")
            continue
        store.copy_evidence(
            report, f"config:{rel}", contain.confined(tree, rel, what=rel), f"config/{rel}"
        )
    store.save(report)


def save_endlog_evidence(report: Report, run_dir: Path, env: str, started_at: float) -> Path | None:
    """This run's end-of-run log (.ini and the .jsonl beside it), picked as the checks pick
    it: the newest under run_dir/logs/<env> written since the run began. Returns it."""
    log = endlogs.newest_log(run_dir, env, started_at)
    if log is None:
        return None
    rel = f"run/logs/{env}/{ENDLOG_STEM}"
    if "/" in env or contain.lexical_problem(rel) is not None:  # env names a folder here
        report.notes.append(f"end-of-run log of env {env!r}: not kept (not a plain name)")
        return None
    # the trainer has exited: nothing moves a checked file before it is copied
    for name, src, suffix in (
        ("endlog_ini", log, ".ini"),
        ("endlog_jsonl", log.with_suffix(".jsonl"), ".jsonl"),
    ):
        why = _regular_in(Path(run_dir), src)
        if why is not None:
            report.notes.append(f"end-of-run log {src.name}: {why}: not kept")
            continue
        if name == "endlog_ini":
            report.notes.append(f"end-of-run log {log} kept as {EVIDENCE_DIR}/{rel}.ini")
        store.copy_evidence(report, name, src.resolve(), f"{rel}{suffix}")
    return log
