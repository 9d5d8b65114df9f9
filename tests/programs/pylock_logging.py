"""The stdlib `logging` lock-order deadlock of CPython issue #96727 ("logging deadlock when
`dictConfig` or `fileConfig` used concurrently with custom handlers",
https://github.com/python/cpython/issues/96727; also bpo-40371 / #84551), Python 3.11.

`dictConfig` takes the module lock (`logging._acquireLock`), then each handler's lock in
`_clearExistingHandlers` → `logging.shutdown` → `Handler.acquire`. A custom handler's
`emit` runs under its handler lock (`Handler.handle`) and calls `logging.getLogger`, which
takes the module lock: the opposite order. Made certain, not racy: the emitting thread
waits until the configuring thread holds the module lock (a second handler's `flush`, which
`shutdown` calls under that lock before it reaches the blocked handler, says so).
"""

import logging
import logging.config
import threading

emitting = threading.Event()  # the emitter holds its handler's lock
module_locked = threading.Event()  # the configurer holds logging's module lock


class LookupHandler(logging.Handler):
    """A handler whose emit looks up a logger (as a library it calls would)."""

    def emit(self, record: logging.LogRecord) -> None:
        emitting.set()
        module_locked.wait()
        logging.getLogger("lookup.from.emit")  # blocks: the configurer holds the module lock


class SignalHandler(logging.Handler):
    """Created last, so `logging.shutdown` (newest first) flushes it first."""

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def flush(self) -> None:
        module_locked.set()


def emit_a_record() -> None:
    logging.getLogger("app").warning("hello")


def reconfigure() -> None:
    emitting.wait()
    logging.config.dictConfig({"version": 1})  # blocks in Handler.acquire of LookupHandler


def main() -> None:
    root = logging.getLogger()
    root.addHandler(LookupHandler())
    root.addHandler(SignalHandler())
    print("configured; emitting and reconfiguring", flush=True)
    workers = [
        threading.Thread(target=emit_a_record, name="emitter"),
        threading.Thread(target=reconfigure, name="configurer"),
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()
