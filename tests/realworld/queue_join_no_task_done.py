"""queue.Queue.join() when a consumer skips task_done() for one item.

Source: the queue docs, Queue.join: "Blocks until all items in the queue have been gotten
and processed ... The count goes down whenever a consumer thread calls task_done()"
(https://docs.python.org/3/library/queue.html#queue.Queue.join); the bug as met in
Rikorose/DeepFilterNet#245 ("a get() without a subsequent task_done() will cause join() to
wait indefinitely").
Versions: CPython 3.11.7, stdlib queue and threading.
Hang: the consumer drops a bad item with `continue` before task_done(); the main thread
waits in Queue.join (Condition.wait on all_tasks_done) and the consumer waits in
Queue.get (Condition.wait on not_empty). No CPU, no output after "queued".
Run: python queue_join_no_task_done.py
"""

import queue
import threading

jobs: "queue.Queue[int]" = queue.Queue()


def consume() -> None:
    while True:
        item = jobs.get()
        if item % 5 == 3:
            continue  # the bug: a skipped item is never marked done
        jobs.task_done()


if __name__ == "__main__":
    threading.Thread(target=consume, name="consumer", daemon=True).start()
    for i in range(10):
        jobs.put(i)
    print("queued", flush=True)
    jobs.join()
    print("all done", flush=True)
