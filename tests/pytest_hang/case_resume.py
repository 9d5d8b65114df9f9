import ctypes
import os
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))


def test_property_path(record_property):
    # a user property that JSON cannot hold as it is
    record_property("where", Path(HERE))


def test_moved_then_native_deadlock():
    # never undone: the test hangs in native code before any teardown
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    os.environ["HANG_MOVED"] = "1"
    ctypes.CDLL(os.environ["HANG_LIB"]).deadlock()


def test_resumed_where_it_started():
    assert os.getcwd() == HERE
    assert "HANG_MOVED" not in os.environ
