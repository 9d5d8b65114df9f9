"""A one-worker ThreadPoolExecutor whose task submits a second task to the same pool and
waits for it: the second task can never start, though every wait has a timeout.

Source: python/cpython#141617 (the concurrent.futures docs' example, completed with
.result(): "This will never complete because there is only one worker thread and it is
executing this function"); langchain-ai/langchain#10638 (sharing one executor across
nested Runnable calls: with max_concurrency=1 an outer task's executor.submit(...).result()
"seems to be dead locking on my machine"); the docs, ThreadPoolExecutor: "Deadlocks can
occur when the callable associated with a Future waits on the results of another Future"
(https://docs.python.org/3/library/concurrent.futures.html#threadpoolexecutor).
Versions: CPython 3.11.7, stdlib concurrent.futures and threading.
Hang: the pool's only worker runs outline() and waits in inner.result(timeout=600) (a
Condition wait: futex, private, with a timeout) for summarize(), which sits in the pool's
work queue behind it; main waits in outer.result(timeout=3600) the same way. Only a second
worker could run summarize(), and max_workers=1 forbids it. No CPU, no output after
"running" for ten minutes, then a TimeoutError in the worker.
Run: python tw_executor_nested_result.py
"""

from concurrent.futures import ThreadPoolExecutor

pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm")


def summarize(text: str) -> str:
    return text[:20]


def outline(doc: str) -> list[str]:
    # a nested call reuses the caller's pool, as a shared per-config executor does
    inner = pool.submit(summarize, doc)
    return [inner.result(timeout=600)]


if __name__ == "__main__":
    print("running", flush=True)
    outer = pool.submit(outline, "a long document about thread pools")
    print(outer.result(timeout=3600), flush=True)
    pool.shutdown()
