"""The names of the files the harness writes, each spelt once: a report folder's files
(docs/report-schema.md), a multi-run command's table (named by its kind), a triage's.
Everything that writes, links, lists or looks for one of them reads the name here."""

from __future__ import annotations

from harness.vocab import TableKind

# a run's report folder
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
STACKS_TXT = "stacks.txt"
SAMPLES_JSON = "samples.json"
OUTPUT_LOG = "output.log"  # the trainer's output, as it ran
BUILD_LOG = "build.log"  # the build's log (its tail), under evidence/
INTERNAL_ERROR_TXT = "harness-internal-error.txt"  # a harness bug's traceback (exit 70)
# a multi-run command's folder: its table (<kind>.json, <kind>.md) and a page over its runs
INDEX_HTML = "index.html"
# a triage's folder
TRIAGE_JSON = "triage.json"
TRIAGE_HTML = "triage.html"
ISSUE_MD = "issue.md"


def table_json(kind: TableKind) -> str:
    """compare.json, sweep.json, repeat.json, bisect.json."""
    return f"{kind}.json"


def table_md(kind: TableKind) -> str:
    return f"{kind}.md"


REPEAT_JSON = table_json(TableKind.REPEAT)
