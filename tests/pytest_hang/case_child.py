import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_child_before():
    out = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
    assert out.stdout.strip() == "42"


def test_stuck_child():
    subprocess.run([sys.executable, os.path.join(HERE, "stuck_child.py")], check=True)


def test_child_after():
    assert os.path.isdir(HERE)
