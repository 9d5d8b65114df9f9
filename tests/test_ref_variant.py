"""`--variant ref:REF` on a real git checkout: a fix branch's diff applied onto the pinned
commit, in a copy; the checkout itself is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import gitrepo
from tests.harness_cli import harness, verdict_of

# builds and runs the replica; its stock run hangs only through libgomp's fork hazard
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("libgomp_fork_hazard"),
]


def test_fix_branch_applied_by_ref(tmp_path: Path) -> None:
    history = gitrepo.make_history(tmp_path / "h", ["churn", "hang"])
    repo = history.root
    gitrepo.git(repo, "checkout", "--quiet", "-b", "fix")
    vecenv = repo / "src" / "vecenv.h"
    text = vecenv.read_text()
    start = text.index(gitrepo.ENV_START)
    pragma_at = text.index(gitrepo.PRAGMA, start)
    vecenv.write_text(text[:pragma_at] + text[pragma_at + len(gitrepo.PRAGMA) :])
    gitrepo.git(repo, "commit", "--quiet", "-am", "serialize env_start (the fix)")
    gitrepo.git(repo, "checkout", "--quiet", "main")
    before = vecenv.read_text()
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    common = (
        "--pin",
        str(history.pin),
        "--scenario",
        str(history.scenario),
        "--checkout",
        str(repo),
    )
    res = harness(
        "run", "breakout", *common, "--variant", "ref:fix", report_root=tmp_path / "r1", env=env
    )
    assert res.code == 0, res.stdout + res.stderr
    variant = res.loaded.variant
    assert variant is not None, res.stdout + res.stderr
    changes = variant.changes
    assert any(c.startswith("ref fix = ") and "src/vecenv.h" in c for c in changes), changes
    stock = harness("run", "breakout", *common, report_root=tmp_path / "r2", env=env)
    assert stock.code == 2 and verdict_of(stock.loaded).location == "env_start"
    assert vecenv.read_text() == before  # the user's checkout was only read
    assert gitrepo.git(repo, "status", "--porcelain") == ""
    missing = harness(
        "run",
        "breakout",
        *common,
        "--variant",
        "ref:no-such-ref",
        report_root=tmp_path / "r3",
        env=env,
    )
    assert missing.code == 5 and "cannot fetch no-such-ref" in missing.stderr
