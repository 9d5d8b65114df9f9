import os
import threading

# HANG_DAEMON=1: the deadlocked threads do not hold Python's exit (a session where
# hang-watch is not the one that fails the test, and so does not end the process)
DAEMON = os.environ.get("HANG_DAEMON") == "1"


def test_pylocks_before():
    assert sorted([3, 1, 2]) == [1, 2, 3]


def test_python_deadlock():
    a, b = threading.Lock(), threading.Lock()
    both = threading.Barrier(2)

    def a_then_b():
        with a:
            both.wait()
            with b:
                pass

    def b_then_a():
        with b:
            both.wait()
            with a:
                pass

    threads = [
        threading.Thread(target=a_then_b, daemon=DAEMON),
        threading.Thread(target=b_then_a, daemon=DAEMON),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_pylocks_after():
    assert len(set("aab")) == 2
