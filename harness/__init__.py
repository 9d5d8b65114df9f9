"""puffer-harness: run PufferLib's native trainer under hang watchdogs and explain what happened."""

import os

# GitPython refuses to import without a git executable; the harness only needs git for git
# pins and bisect, and reports a missing git there, in one line, when it is needed.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

__version__ = "0.1.0"
