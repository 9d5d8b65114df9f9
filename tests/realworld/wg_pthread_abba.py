"""Two native threads take two pthread mutexes in opposite orders (the model lock and the
mixer lock), while a third thread keeps logging.

Source: jubatus/jubatus#180 ("linear_mixer and server_impl deadlock": server_impl acquires
the model write lock, then the mixer's lock; the mixer's get_diff/put_diff acquire the
mixer's lock, then the model lock; fix: one order); the same shape in
stripe-archive/sequins#90 ("thread-1: acquire w.lock / thread-2: acquire w.hooksLock /
thread-1: acquire w.hooksLock (blocks on thread-2) / thread-2: acquire w.lock (blocks on
thread-1)"); pthread_mutex_lock(3p): a default mutex has no deadlock detection.
Versions: CPython 3.11.7, stdlib ctypes on glibc's pthread_mutex_lock (the GIL is released
during the calls, as in any C extension that locks natively).
Hang: a barrier makes both threads hold their first mutex before either asks for its
second; both then wait in pthread_mutex_lock (futex, no timeout) for the mutex the other
holds; main waits in join. A PARTIAL deadlock: the status thread prints every 0.5 s.
Run: python wg_pthread_abba.py
"""

import ctypes
import threading
import time

libc = ctypes.CDLL(None)  # glibc: pthread_mutex_* live in libc (or libpthread, loaded)
MUTEX_BYTES = 64  # sizeof(pthread_mutex_t) is 40 on x86_64 and 48 on aarch64


def new_mutex() -> ctypes.Array[ctypes.c_char]:
    m = ctypes.create_string_buffer(MUTEX_BYTES)
    if libc.pthread_mutex_init(m, None) != 0:
        raise OSError("pthread_mutex_init")
    return m


model_lock, mixer_lock = new_mutex(), new_mutex()
both_hold = threading.Barrier(2)


def update_model() -> None:  # server_impl: the model lock, then the mixer's
    libc.pthread_mutex_lock(model_lock)
    both_hold.wait()
    libc.pthread_mutex_lock(mixer_lock)
    libc.pthread_mutex_unlock(mixer_lock)
    libc.pthread_mutex_unlock(model_lock)


def mix() -> None:  # linear_mixer: its own lock, then the model's
    libc.pthread_mutex_lock(mixer_lock)
    both_hold.wait()
    libc.pthread_mutex_lock(model_lock)
    libc.pthread_mutex_unlock(model_lock)
    libc.pthread_mutex_unlock(mixer_lock)


def status() -> None:
    while True:
        print(f"status: serving, {threading.active_count()} threads", flush=True)
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
