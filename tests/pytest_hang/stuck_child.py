"""A child that deadlocks: two threads, two locks, opposite order."""

import threading

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


threads = [threading.Thread(target=a_then_b), threading.Thread(target=b_then_a)]
for t in threads:
    t.start()
for t in threads:
    t.join()
