"""process/tools.run_tool leaves nothing of a tool's session behind, not even a zombie in a
process that adopts orphans (the harness is a subreaper; so is a test worker that ran it
in-process, which is how a gdb helper once outlived every doctor test that followed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import os, sys, time
    import psutil
    from harness.process.proctree import become_subreaper
    from harness.process.tools import run_tool
    assert become_subreaper()
    # the tool exits at once and leaves `sleep` running in its session: an orphan we adopt
    res = run_tool(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], timeout=10)
    left = int(res.stdout.split()[0])
    kids = [(c.pid, c.status()) for c in psutil.Process().children(recursive=True)]
    print(left, kids)
    sys.exit(1 if kids or psutil.pid_exists(left) else 0)
    """
)


def test_a_tools_orphan_is_killed_and_reaped_by_a_subreaper() -> None:
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    pid, _, kids = res.stdout.partition(" ")
    assert int(pid) > 0 and kids.strip() == "[]"
