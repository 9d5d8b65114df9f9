"""Two threads wait for a lock whose holder's stack no longer shows it: `checkout` took it
in a helper that returned (`lock.acquire()` without a `with`), then waits forever for an
Event. No frame says who holds the lock, and CPython's C lock records no owner: the
harness must say "owner unknown", not guess."""

import threading

inventory = threading.Lock()
never = threading.Event()


def reserve() -> None:
    inventory.acquire()  # released by nobody: the caller forgets


def checkout() -> None:
    reserve()
    print("checkout holds the inventory", flush=True)
    never.wait()


def restock() -> None:
    with inventory:
        pass


def main() -> None:
    holder = threading.Thread(target=checkout, name="checkout", daemon=True)
    holder.start()
    while not inventory.locked():
        pass
    waiters = [threading.Thread(target=restock, name=f"restock{i}") for i in range(2)]
    for w in waiters:
        w.start()
    for w in waiters:
        w.join()


if __name__ == "__main__":
    main()
