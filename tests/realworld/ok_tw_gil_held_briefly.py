"""HEALTHY look-alike of tw_gil_held_native_lock.py: the main thread holds the GIL for 7 s
in a native call that sleeps, then lets go; the module thread that needs Python waits for
the GIL all that time, then goes on.

Source: ceph/ceph#30468 ("we should not hold GIL when performing blocking operations":
here the blocking call ends by itself); ceph/ceph#46302 (the GIL held across native code).
Versions: CPython 3.11.7 (stdlib ctypes over glibc 2.36's usleep).
Looks like a hang: for 7 s the module thread retries the GIL every 5 ms (a timed futex wait
on the runtime's state) and main sits in a native sleep holding it; no output, no CPU.
Ends: the sleep returns, main's call ends and drops the GIL, the module thread runs; exit 0.
Run: python ok_tw_gil_held_briefly.py
"""

import ctypes
import threading
import time

libc_with_gil = ctypes.PyDLL(None)  # calls keep the GIL: an extension without ALLOW_THREADS
started = threading.Event()


def module_thread() -> None:
    started.set()
    time.sleep(0.3)  # the GIL released: main takes it
    names = sorted(str(i) for i in range(100))  # needs the GIL: waits for main's call
    print("module done", len(names), flush=True)


t = threading.Thread(target=module_thread, name="module")
t.start()
started.wait()
print("native call", flush=True)
libc_with_gil.usleep(7_000_000)  # 7 s in native code, the GIL held
t.join()
print("done")
