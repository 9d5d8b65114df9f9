import time

import pytest


@pytest.fixture
def slow_teardown():
    yield
    time.sleep(1.5)  # the same test, still past --hang-timeout: no second verdict


def test_spin(slow_teardown):
    # busy in Python for ever: never quiescent, only --hang-timeout ends it
    n = 0
    while True:
        n += 1


def test_spin_after():
    assert True
