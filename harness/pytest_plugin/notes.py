"""What the plugin says of its own failures (a watcher that did not start, stalled or died;
its own code found hung; a journal that stopped): each once, in a `hang-watch` section of
the terminal summary, so that a session that went on unwatched says so where its results
are read. An xdist worker's notes travel to the controller in its `workeroutput` (a
worker's terminal summary is never shown)."""

from __future__ import annotations

from typing import Any

import pytest

WORKER_KEY = "hang_watch_warnings"


class Notes:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        if text not in self.lines:
            self.lines.append(text)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """xdist's controller: a worker's notes come back in its output."""
        out = getattr(node, "workeroutput", None) or {}
        name = getattr(getattr(node, "gateway", None), "id", "worker")
        for text in out.get(WORKER_KEY, []) if isinstance(out, dict) else []:
            self.add(f"[{name}] {text}")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        workeroutput = getattr(self.config, "workeroutput", None)
        if isinstance(workeroutput, dict) and self.lines:
            workeroutput[WORKER_KEY] = list(self.lines)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.section("hang-watch", sep="=", yellow=True, bold=True)
            for text in self.lines:
                terminalreporter.line(text, yellow=True)
