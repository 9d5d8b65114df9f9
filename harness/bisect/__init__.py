"""Bisect: find the first commit of an upstream's first-parent history that shows a failure,
testing each commit with the harness's own pipeline (prepare → cached build → run under the
watchdog → verdict).

`harness bisect ENV --good A --bad B` drives the search itself: it checks both ends, runs a
binary search that steps around untestable commits, and writes a report. `harness
bisect-step ENV` is the test for `git bisect run`: it runs the harness on the checkout's HEAD
and exits 0 (good), 1 (bad), 125 (skip) or 255 (abort). See docs/bisect.md.

`model` holds the options and records (each run a `report.runs.RunRow`, the row every
multi-run command shares), `steps` tests one commit, `search` the search and its report
files, `render` the markdown (its steps table through `report.matrix`) and terminal views.
Git reads come from harness.source.
"""

from harness.bisect.model import EXPECTS as EXPECTS
from harness.bisect.model import BisectOptions as BisectOptions
from harness.bisect.model import BisectResult as BisectResult
from harness.bisect.model import StepRecord as StepRecord
from harness.bisect.render import print_summary as print_summary
from harness.bisect.render import render_markdown as render_markdown
from harness.bisect.search import bisect as bisect
from harness.bisect.search import bisect_step as bisect_step
from harness.bisect.steps import classify_run as classify_run
from harness.bisect.steps import combine as combine
