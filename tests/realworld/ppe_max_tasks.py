"""ProcessPoolExecutor with max_tasks_per_child stops after its worker retires.

Source: python/cpython#115634 "ProcessPoolExecutor hangs when
1<max_tasks_per_child<num_submitted//max_workers"
(https://github.com/python/cpython/issues/115634); fixed by python/cpython#140900 in 3.15
and 3.13/3.14 backports (python/cpython#152928), not in 3.11.
Versions: CPython 3.11.7, stdlib concurrent.futures (max_tasks_per_child implies spawn).
Hang: the only worker exits (status 0) after its 2 tasks; a stale idle-worker token makes
the executor's manager skip the replacement, so the 8 queued tasks never run and
Future.result() in the main thread waits forever. No CPU, no output after "0 1".
Run: python ppe_max_tasks.py
"""

from concurrent.futures import ProcessPoolExecutor


def square(i: int) -> int:
    return i * i


if __name__ == "__main__":
    with ProcessPoolExecutor(1, max_tasks_per_child=2) as exe:
        futures = [exe.submit(square, i) for i in range(10)]
        for f in futures:
            print(f.result(), flush=True)
