"""A saved report back as the typed model: `load_report(folder or report.json) -> Report`, for
commands that render or check a report again without running anything (`harness report`,
`harness check`).

A saved report is input like any other: it may be damaged, hand-edited, from a newer
harness, or hostile. So it is read bounded and checked before anything uses it:

- **regular files inside the folder only** (`harness.contain`): report.json and every file
  under evidence/ is resolved inside the report folder and opened with O_NOFOLLOW as a
  regular file; a FIFO, a device (`evidence/pin.json -> /dev/zero`), a folder or a link out
  of the folder is refused before a byte is read;
- **size caps**: at most `REPORT_JSON_LIMIT` for report.json and `EVIDENCE_LIMIT` for an
  evidence file (more is refused, not cut: half a JSON file is no report); output.log is
  read to its last `pipeline.saved.OUTPUT_LOG_LIMIT` bytes, with a note;
- **nesting**: JSON deeper than `MAX_DEPTH` is refused (Python's json parser would raise
  RecursionError at about a thousand levels, and a renderer that walks it could too);
- **schema_version**: one of `SCHEMA_VERSIONS_READ`; a newer one is refused with the
  versions this harness reads, never misread;
- **types**: pydantic reads the JSON onto the dataclasses by their own type hints, strictly
  as JSON means it (`parsing.parse`), so a field added to the model is read back
  without a change here. Tolerant of age: a key the model lacks is ignored, a field added
  since has a default (a report from before `host` and `conditions` were recorded reads
  with both None; tests/data/reports/ holds real reports of older harnesses, which must keep
  loading), and the top-level keys an early report wrote otherwise are mapped below. Not
  tolerant of damage: a value of the wrong type, a word outside its vocabulary (a verdict
  kind "quantum-hang"), a null where no null belongs, or a non-finite number in a typed
  field is an error naming the file and the key path (`…/report.json: not a harness report
  this version reads: limits.wall_s: inf is not a finite number`). Values inside free-form
  maps and lists (metrics, a pin's tables) are data and are kept as written
  (`jsonvalues.Measured`). A stack's frame is read as the frame its keys name (an inlined
  one carries `inline`: `sampling.model.AnyFrame`).

Every refusal is one `HarnessError` line with the USAGE exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import vocab
from harness.errors import HarnessError
from harness.filenames import REPORT_JSON
from harness.outcome import INTERRUPTED_BASE, Kind
from harness.report.model import Report
from harness.report.parsing import parse
from harness.report.reading import check_schema_version, read_report_json
from harness.vocab import RunMode


def load_report(path: Path) -> Report:
    """The report saved in `path` (a report folder or its report.json)."""
    report_json, data = read_report_json(path)
    return report_from_json(data, report_json.parent, report_json)


def report_from_json(data: dict[str, Any], directory: Path, source: Path | None = None) -> Report:
    """The typed report from report.json's data; `directory` is where its files are now;
    `source` names the file in errors (default: directory/report.json)."""
    source = source or directory / REPORT_JSON
    check_schema_version(data, source)
    fields = dict(data)
    fields.setdefault("run_id", directory.name)
    fields.setdefault("harness_argv", [])
    if fields.get("mode") not in vocab.values(RunMode):
        # a report from before `mode` was written: a run names its env, a watch does not
        fields["mode"] = RunMode.WATCH if data.get("env") is None else RunMode.RUN
    # `{}` is how to_json writes an absent pin, variant, command, limits or exit
    for key in ("pin", "variant", "command", "limits", "exit"):
        if fields.get(key) == {}:
            fields[key] = None
    limits = fields.get("limits")
    if isinstance(limits, dict):  # a report from before the quiescence window had none
        fields["limits"] = {"quiescent_s": 0.0, **limits}
    fields["directory"] = str(directory)  # where it is now, not where it was written
    try:
        report = parse(Report, fields)
    except ValueError as exc:  # the first wrong value, or one the model's own checks refuse
        # one line: a key path may hold any character (a metric named "\n")
        why = str(exc).encode("unicode_escape").decode("ascii")
        raise HarnessError(f"{source}: not a harness report this version reads: {why}") from None
    verdict, saved = report.verdict, data.get("verdict")
    if verdict is not None and isinstance(saved, dict):
        code = saved.get("exit_code")
        if (
            verdict.kind is Kind.INTERRUPTED
            and isinstance(code, int)
            and INTERRUPTED_BASE < code < INTERRUPTED_BASE + 128
        ):
            verdict.become(Kind.INTERRUPTED, signum=code - INTERRUPTED_BASE)
    return report
