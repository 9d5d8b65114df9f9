import ctypes
import os


def test_gil_before():
    assert "gil".upper() == "GIL"


def test_gil_held_deadlock():
    # PyDLL keeps the GIL during the call: not even the plugin's listener thread can run
    lib = ctypes.PyDLL(os.environ["HANG_LIB"])
    lib.deadlock()


def test_gil_after():
    assert True
