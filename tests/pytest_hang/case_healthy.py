import subprocess
import sys
import time


def test_long_sleep():
    time.sleep(8)


def test_slow_child():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(6)"], check=True)


def test_quick():
    assert True
