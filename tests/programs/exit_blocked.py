"""The main thread returns while a non-daemon thread waits on an Event that
is never set: the interpreter blocks in threading._shutdown joining it."""

import threading

shutdown_requested = threading.Event()


def wait_for_shutdown() -> None:
    shutdown_requested.wait()  # never set


def main() -> None:
    threading.Thread(target=wait_for_shutdown, name="shutdown_wait").start()
    print("main returning", flush=True)


if __name__ == "__main__":
    main()
