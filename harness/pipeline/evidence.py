"""What a run copies into its report folder (evidence/) so that `harness check` on the
report reads only the folder, on any machine, forever (docs/report-schema.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.analysis import endlogs
from harness.report import store
from harness.report.model import EVIDENCE_DIR, Report

BUILD_LOG_TAIL = 64 * 1024  # the end of the build log kept in the report


ENDLOG_STEM = "end-of-run"


def inside(root: Path, rel: str) -> bool:
    """`rel` names a file under `root` (a config path like ../x.ini would not)."""
    try:
        (root / rel).resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return not Path(rel).is_absolute()


def save_build_evidence(
    report: Report, tree: Path, log_path: Path, config_files: Sequence[str], env: str
) -> None:
    """The build log's tail and the config files the checks read, from the build tree."""
    store.copy_evidence(report, "build_log", log_path, "build.log", tail_bytes=BUILD_LOG_TAIL)
    for template in config_files:
        rel = template.format(env=env)
        if not inside(tree, rel):
            report.notes.append(f"config file {rel} is outside the build tree: not kept")
            continue
        store.copy_evidence(report, f"config:{rel}", tree / rel, f"config/{rel}")
    store.save(report)


def save_endlog_evidence(report: Report, run_dir: Path, env: str, started_at: float) -> Path | None:
    """This run's end-of-run log (.ini and the .jsonl beside it), picked as the checks pick
    it: the newest under run_dir/logs/<env> written since the run began. Returns it."""
    log = endlogs.newest_log(run_dir, env, started_at)
    if log is None:
        return None
    rel = f"run/logs/{env}/{ENDLOG_STEM}"
    report.notes.append(f"end-of-run log {log} kept as {EVIDENCE_DIR}/{rel}.ini")
    store.copy_evidence(report, "endlog_ini", log, f"{rel}.ini")
    store.copy_evidence(report, "endlog_jsonl", log.with_suffix(".jsonl"), f"{rel}.jsonl")
    return log
