import threading
from concurrent.futures import ThreadPoolExecutor


def deadlock():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # never: the lock is its own


def test_executor_deadlock():
    # the first interrupt lands in result(); __exit__ then joins the deadlocked worker
    with ThreadPoolExecutor(max_workers=1) as ex:
        ex.submit(deadlock).result()


def test_executor_after():
    assert True
