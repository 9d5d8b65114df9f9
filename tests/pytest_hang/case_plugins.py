"""Tests that need the plugins real suites run with: pytest-asyncio (strict mode: marked),
pytest-rerunfailures (a test that fails on its first try), pytest-forked (a test in a
forked child), all under pytest-randomly's shuffle and pytest-timeout; and a Python
deadlock among them (run with --hang-watch only)."""

import asyncio
import os
import threading
from pathlib import Path

import pytest

STATE = {"changed_by_the_forked_test": False}


@pytest.mark.asyncio
async def test_async_sleep_and_gather():
    got = await asyncio.gather(asyncio.sleep(0.01, "a"), asyncio.sleep(0.02, "b"))
    assert list(got) == ["a", "b"]


@pytest.mark.asyncio
async def test_async_to_thread():
    assert await asyncio.to_thread(sum, [1, 2, 3]) == 6


@pytest.mark.flaky(reruns=2)
def test_fails_on_its_first_try():
    mark = Path(os.environ["HANG_FLAKY_DIR"]) / "tried"
    if not mark.exists():
        mark.write_text("once\n")
        pytest.fail("the first try fails")


@pytest.mark.forked
def test_in_a_forked_child():
    STATE["changed_by_the_forked_test"] = True  # the child's copy: the parent's is not
    assert threading.active_count() >= 1


def test_plain_after_the_forked_one():
    # a forked test's change stays in its child, whatever order randomly chose
    assert STATE["changed_by_the_forked_test"] is False


def test_python_deadlock():
    a, b = threading.Lock(), threading.Lock()
    both = threading.Barrier(2)

    def take(first, second):
        with first:
            both.wait()
            with second:
                pass

    one = threading.Thread(target=take, args=(a, b), daemon=True)
    two = threading.Thread(target=take, args=(b, a), daemon=True)
    one.start()
    two.start()
    one.join()
