"""HEALTHY look-alike of wg_pthread_abba.py: the two threads take the two pthread mutexes in
the same order (the fix of jubatus/jubatus#180); the first holds both for 8 s while the
second waits in pthread_mutex_lock, beside the logging thread.

Source: jubatus/jubatus#180 (the fix: "first, acquire model lock; next, acquire mixer's
lock").
Versions: CPython 3.11.7, stdlib ctypes on glibc's pthread_mutex_lock.
Looks like a hang: for 8 s the mixer thread waits in a futex wait with no timeout for a
mutex whose holder sleeps, main waits in join, and only the status thread prints.
Ends: the holder unlocks, the mixer runs; exit 0.
Run: python ok_wg_pthread_lock_order.py
"""

import ctypes
import threading
import time

libc = ctypes.CDLL(None)
MUTEX_BYTES = 64


def new_mutex() -> ctypes.Array[ctypes.c_char]:
    m = ctypes.create_string_buffer(MUTEX_BYTES)
    if libc.pthread_mutex_init(m, None) != 0:
        raise OSError("pthread_mutex_init")
    return m


model_lock, mixer_lock = new_mutex(), new_mutex()
server_holds = threading.Event()


def update_model() -> None:
    libc.pthread_mutex_lock(model_lock)
    libc.pthread_mutex_lock(mixer_lock)
    server_holds.set()
    time.sleep(8)  # a long model update under both locks
    libc.pthread_mutex_unlock(mixer_lock)
    libc.pthread_mutex_unlock(model_lock)


def mix() -> None:
    server_holds.wait()
    libc.pthread_mutex_lock(model_lock)  # the same order as the server
    libc.pthread_mutex_lock(mixer_lock)
    libc.pthread_mutex_unlock(mixer_lock)
    libc.pthread_mutex_unlock(model_lock)


def status() -> None:
    while True:
        print("status: serving", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    threading.Thread(target=status, name="status", daemon=True).start()
    workers = [
        threading.Thread(target=update_model, name="server"),
        threading.Thread(target=mix, name="mixer"),
    ]
    for t in workers:
        t.start()
    print("running", flush=True)
    for t in workers:
        t.join()
    print("mixed", flush=True)
