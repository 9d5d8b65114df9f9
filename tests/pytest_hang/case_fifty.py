"""Fifty passing tests, then a deadlock in native code in pytest's main process (a ctypes
call into the C lock cycle; with HANG_GIL=1 through ctypes.PyDLL, which keeps the GIL, so
that nothing of Python runs in pytest), then tests that must still run."""

import ctypes
import os

import pytest


@pytest.mark.parametrize("n", range(50))
def test_passing(n):
    assert n + 1 > n


def test_native_deadlock_after_fifty():
    load = ctypes.PyDLL if os.environ.get("HANG_GIL") == "1" else ctypes.CDLL
    load(os.environ["HANG_LIB"]).deadlock()


@pytest.mark.parametrize("n", range(3))
def test_after_the_hang(n):
    assert n < 3
