"""A watchdog kills an idle consumer process while it waits in multiprocessing.Queue.get();
the queue's read lock dies held, and the replacement consumer's get(timeout=600) waits for
it ten minutes while frames pile up in the pipe.

Source: ShannonAI/service-streamer#94 (translated: a worker killed by hand "sometimes" keeps the
input queue's _rlock; the second worker then never gets a value from the queue, each
get(timeout=...) times out, and the queue keeps growing); 3rdBitLabs/Fregata#79 ("All
cameras silently stall ... after detector replacement": the killed consumer "Holds
Queue._rlock while waiting for pipe data"); python/cpython#96062 (a SIGKILLed worker
"dead immediately, and don't release the lock"); the docs' warning on killing a process
that uses a Queue (https://docs.python.org/3/library/multiprocessing.html#pipes-and-queues).
Versions: CPython 3.11.7, stdlib multiprocessing (fork start method, Linux; the Queue's
_rlock is a POSIX named semaphore, a mapped /dev/shm/sem.* file, unlinked).
Hang: detector-0 takes the queue's _rlock in get() and blocks reading the empty pipe; it
sends no heartbeat for 1 s, so the watchdog SIGKILLs it and starts detector-1, then
puts three frames. detector-1 waits in Queue.get(timeout=600) -> _rlock.acquire(True, 600):
sem_timedwait on the shared semaphore (futex, with a timeout); only the dead detector-0
could release it. The parent waits in results.get(timeout=3600) (poll on the results
pipe, with a timeout); its feeder thread idles. No CPU, no output after "running".
Run: python tw_mp_queue_reader_killed.py
"""

import multiprocessing as mp
import queue


def detect(frames, results, heartbeat) -> None:
    while True:
        frame = frames.get(timeout=600)  # holds frames._rlock while it waits
        heartbeat.set()
        results.put((frame, "person" if frame % 2 else "car"))


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    frames, results = ctx.Queue(), ctx.Queue()
    heartbeat = ctx.Event()
    print("running", flush=True)
    detector = ctx.Process(target=detect, args=(frames, results, heartbeat), name="detector-0")
    detector.start()
    if not heartbeat.wait(timeout=1.0):  # watchdog: no sign of life, restart it
        detector.kill()
        detector.join()
        detector = ctx.Process(target=detect, args=(frames, results, heartbeat), name="detector-1")
        detector.start()
    for frame in range(3):
        frames.put(frame)
    try:
        print([results.get(timeout=3600) for _ in range(3)], flush=True)
    except queue.Empty:
        print("no detections", flush=True)
    detector.kill()
