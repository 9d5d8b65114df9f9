"""Lock-order deadlock in stdlib logging: dictConfig against a handler's emit.

Source: python/cpython#96727 "logging deadlock when `dictConfig` or `fileConfig` used
concurrently with custom handlers" (https://github.com/python/cpython/issues/96727); the
same order met in open-telemetry/opentelemetry-python#4636.
Versions: CPython 3.11.7, stdlib logging.
Hang: thread "emitter" holds its handler's lock (Handler.handle takes it around emit) and
emit calls logging.getLogger for a new name, which takes the module lock
(logging._acquireLock); the main thread is in logging.config.dictConfig, which holds the
module lock and, in _clearExistingHandlers -> logging.shutdown, takes every handler's lock
(Handler.acquire). Two RLocks taken in opposite orders: both threads block, no CPU.
The short sleep in emit only makes the interleaving happen on every run.
Run: python logging_dictconfig.py
"""

import logging
import logging.config
import threading
import time

in_emit = threading.Event()


class AuditHandler(logging.Handler):
    """A handler whose emit uses another logger, as many library handlers do."""

    def emit(self, record: logging.LogRecord) -> None:
        in_emit.set()
        time.sleep(0.3)  # the main thread now enters dictConfig and holds the module lock
        logging.getLogger("audit.sink").debug("%s", record.getMessage())


if __name__ == "__main__":
    root = logging.getLogger()
    root.addHandler(AuditHandler())
    root.setLevel(logging.INFO)
    emitter = threading.Thread(target=root.info, args=("request served",), name="emitter")
    emitter.start()
    in_emit.wait()
    print("reconfiguring logging", flush=True)
    logging.config.dictConfig({"version": 1, "root": {"level": "INFO"}})
    emitter.join()
    print("done", flush=True)
