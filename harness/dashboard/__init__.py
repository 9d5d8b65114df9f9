"""Turn a trainer's terminal output into metrics frames.

Parsers (``PARSERS``, in ``registry``), fed one output line at a time:

- ``puffer5``: the PufferLib 5.0 dashboard, an 80-column Unicode box (``╭─╮ │ ╰─╯``) with the
  header ``PufferLib 5.0`` and a 🐡, printed once per logged epoch, and its one-line compact form
  (``PufferLib 5.0  env=…  steps=…``) used on small terminals. Our replica prints the same box and
  may add rows and sections. A frame is complete when its box closes.
- ``puffer3``: the PufferLib 3.0 rich dashboard, a rounded box per epoch whose first line carries
  the cursor-home prefix ``ESC[0;0H``.
- ``lines``: every non-empty line is a frame without metrics (generic progress).

Each format has its module (``puffer5``, ``puffer3``, ``lines``), and both box parsers
collect rows in ``box``; ``text`` holds the cleanup, sink and cells the formats
share, ``values`` the value grammar. The layouts, the label → key tables and the log file formats
are in ``docs/formats.md``. The trainer's end-of-run log files are read by
``harness.analysis.endlogs``.

Keys are the trainer's own log keys (``SPS``, ``agent_steps``, ``uptime``, ``epoch``,
``env/<name>``, ``loss/<name>``, ``perf/<name>``, ``util/<name>``), plus what only the dashboard
shows: ``params``, ``to_go`` (5.0) / ``remaining`` (3.0) in seconds, ``perf/<name>_pct`` (the
share column) and, for 3.0, ``util/cpu_percent``, ``util/dram_percent``, ``util/vram_percent``.
Text values (the env name, 3.0's "A hair past a freckle") go to ``MetricsFrame.text``.

Values follow the rules in ``values`` (``parse_value``).

Robustness: ANSI escapes are stripped anywhere, a cursor-home escape starts a new frame (the
old partial one is dropped), lines are cut to 64 KiB before parsing, a box longer than 500 rows
is discarded, a frame holds at most 1000 keys; no input raises.
"""

from harness.dashboard.box import Puffer3Parser as Puffer3Parser
from harness.dashboard.box import Puffer5Parser as Puffer5Parser
from harness.dashboard.lines import LinesParser as LinesParser
from harness.dashboard.registry import PARSERS as PARSERS
from harness.dashboard.registry import Parser as Parser
from harness.dashboard.registry import get_parser as get_parser
from harness.dashboard.registry import latest as latest
from harness.dashboard.registry import measured_sps as measured_sps
from harness.dashboard.registry import parse_text as parse_text
from harness.dashboard.text import MAX_FRAME_LINES as MAX_FRAME_LINES
from harness.dashboard.text import MAX_KEYS as MAX_KEYS
from harness.dashboard.text import MAX_LINE_CHARS as MAX_LINE_CHARS
from harness.dashboard.text import MetricsFrame as MetricsFrame
from harness.dashboard.values import parse_duration as parse_duration
from harness.dashboard.values import parse_number as parse_number
from harness.dashboard.values import parse_value as parse_value
