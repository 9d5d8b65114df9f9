"""Two worker threads idle at an empty queue.Queue, the main thread joining them: how every
thread pool waits for work (review of issue 18, 2.6). Both consumers sit in Condition.wait
under Queue.get; that is no lock finding, whatever else the process does. (The program
never ends by itself: the test that runs it kills it.)"""

import queue
import threading

work: queue.Queue[int] = queue.Queue()


def consume() -> None:
    while True:
        item = work.get()  # idle here: nothing is ever put
        work.task_done()
        print(item, flush=True)


def main() -> None:
    workers = [threading.Thread(target=consume, name=f"consumer{i}") for i in range(2)]
    for w in workers:
        w.start()
    print("consumers idle", flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
