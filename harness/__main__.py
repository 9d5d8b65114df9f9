"""`python -m harness` behaves exactly like the `harness` console script."""

import sys

from harness.cli import main

sys.exit(main())
