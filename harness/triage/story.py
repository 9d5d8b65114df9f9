"""A triage told for people (docs/triage.md): `write_story` writes triage.html (the story,
story_html) and issue.md (the bug report to file upstream, story_issue) into the triage
folder, from the TriageResult alone and the files the runs left in that folder."""

from __future__ import annotations

from pathlib import Path

from harness.filenames import ISSUE_MD, TRIAGE_HTML
from harness.files import atomic_write
from harness.triage.model import TriageResult
from harness.triage.story_html import render_story
from harness.triage.story_issue import render_issue

STORY_FILES = (ISSUE_MD, TRIAGE_HTML)


def write_story(result: TriageResult) -> list[Path]:
    """issue.md, then triage.html (which links issue.md, so it comes second), each written
    atomically into result.directory: the paths written."""
    issue = result.directory / ISSUE_MD
    atomic_write(issue, render_issue(result))
    story = result.directory / TRIAGE_HTML
    atomic_write(story, render_story(result))
    return [story, issue]
