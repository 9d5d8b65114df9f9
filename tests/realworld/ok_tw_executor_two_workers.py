"""HEALTHY look-alike of tw_executor_nested_result.py: the same nested submit, with a
second worker to run the inner task, which takes 7 s.

Source: the concurrent.futures docs, ThreadPoolExecutor
(https://docs.python.org/3/library/concurrent.futures.html#threadpoolexecutor): a task may
wait on another Future when a free worker can run it.
Versions: CPython 3.11.7, stdlib concurrent.futures and threading.
Looks like a hang: for 7 s main waits in outer.result(timeout=3600) and the first worker
in inner.result(timeout=600) (futex waits with a timeout), the second worker sleeps; no
CPU, no output.
Ends: the second worker finishes summarize(), both results arrive; exit 0.
Run: python ok_tw_executor_two_workers.py
"""

import time
from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="llm")


def summarize(text: str) -> str:
    time.sleep(7)  # a slow model call
    return text[:20]


def outline(doc: str) -> list[str]:
    inner = pool.submit(summarize, doc)
    return [inner.result(timeout=600)]


if __name__ == "__main__":
    print("running", flush=True)
    outer = pool.submit(outline, "a long document about thread pools")
    print(outer.result(timeout=3600), flush=True)
    pool.shutdown()
