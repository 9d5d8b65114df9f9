"""Two Python threads take two locks in opposite order (barrier first): a
certain deadlock whose stacks py-spy can name. The main thread blocks in join."""

import threading

account_a = threading.Lock()
account_b = threading.Lock()
both_hold_one = threading.Barrier(2)


def transfer_a_to_b() -> None:
    with account_a:
        print("transfer_a_to_b holds account_a", flush=True)
        both_hold_one.wait()
        with account_b:  # never acquired: transfer_b_to_a holds it
            pass


def transfer_b_to_a() -> None:
    with account_b:
        print("transfer_b_to_a holds account_b", flush=True)
        both_hold_one.wait()
        with account_a:  # never acquired: transfer_a_to_b holds it
            pass


def main() -> None:
    workers = [
        threading.Thread(target=transfer_a_to_b, name="xfer_a_to_b"),
        threading.Thread(target=transfer_b_to_a, name="xfer_b_to_a"),
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
