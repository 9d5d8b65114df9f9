"""A module thread takes the host's native lock and then needs Python; the main thread holds
the GIL while it waits in native code for that same lock: GIL-versus-mutex deadlock.

Source: ceph/ceph#46302 ("The mgr process can deadlock if the GIL is held while attempting
to lock a mutex", tracker 55687); ceph/ceph#26723 ("other bits of the code hold the objecter
lock and then take the GIL"); ceph/ceph#30468 ("we should not hold GIL when performing
blocking operations ... otherwise we could starve/dead lock other threads that want to
acquire the GIL").
Versions: CPython 3.11.7 (stdlib ctypes over glibc 2.36's pthread_mutex_lock).
Hang: the module thread locks the native mutex through ctypes.CDLL (the GIL released during
the call), then runs Python under it, so it needs the GIL back; the main thread calls
pthread_mutex_lock through ctypes.PyDLL, which keeps the GIL for the whole call, as a C
extension does that omits Py_BEGIN_ALLOW_THREADS. Main: an untimed futex wait on the mutex,
whose owner is the module thread; the module thread: take_gil's condition wait, re-armed
every 5 ms for as long as main holds the GIL. No output after "notify", almost no CPU.
Run: python tw_gil_held_native_lock.py
"""

import ctypes
import threading
import time

libc = ctypes.CDLL(None)  # calls release the GIL
libc_with_gil = ctypes.PyDLL(None)  # calls keep it: an extension without ALLOW_THREADS
registry_lock = ctypes.create_string_buffer(64)  # a default pthread_mutex_t (all zero)
taken = threading.Event()


def module_thread() -> None:
    """Like a mgr module's notify: take the registry's native lock, then run Python."""
    libc.pthread_mutex_lock(registry_lock)
    taken.set()
    time.sleep(0.3)  # the GIL released: main runs and takes it
    names = sorted(str(i) for i in range(100))  # Python under the native lock
    libc.pthread_mutex_unlock(registry_lock)
    print("module done", len(names), flush=True)


t = threading.Thread(target=module_thread, name="module")
t.start()
taken.wait()
print("notify", flush=True)
libc_with_gil.pthread_mutex_lock(registry_lock)  # the GIL held while it waits
libc_with_gil.pthread_mutex_unlock(registry_lock)
t.join()
print("done")
