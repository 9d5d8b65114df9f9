import ctypes
import os


def test_native_before():
    assert sum(range(10)) == 45


def test_native_deadlock():
    lib = ctypes.CDLL(os.environ["HANG_LIB"])
    lib.deadlock()


def test_native_after():
    assert "hang".upper() == "HANG"
