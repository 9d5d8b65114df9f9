"""Healthy look-alike of dataloader_fork_lock.py: the DataLoader forks its workers while a
parent thread holds the dataset's lock, but the workers take a lock of their own (created in
`worker_init_fn`, after the fork), as the os.fork docs and BaguaSys/bagua#35 advise; the update
in the parent goes on for a while and the loader is silent meanwhile (a slow first batch).
Source: BaguaSys/bagua#35 and the os.fork docs (make locks after the fork, not before).
Versions: CPython 3.11.7, torch 2.13.0+cpu.
Ends: exit 0 after about 12 s, the batches printed.
Run: python ok_dataloader_lock_released.py
"""

import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

CACHE_LOCK = threading.Lock()
refreshing = threading.Event()


def refresh_cache() -> None:
    with CACHE_LOCK:
        refreshing.set()
        time.sleep(30)


class Cached(Dataset[torch.Tensor]):
    lock = CACHE_LOCK

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        with self.lock:
            time.sleep(3)  # a slow read: the first batch after 6 s, 12 s in all
            return torch.tensor([i])


def fresh_lock(_: int) -> None:
    info = get_worker_info()
    assert info is not None
    info.dataset.lock = threading.Lock()  # type: ignore[attr-defined]


if __name__ == "__main__":
    threading.Thread(target=refresh_cache, daemon=True).start()
    refreshing.wait()
    print("epoch 0", flush=True)
    loader = DataLoader(Cached(), batch_size=2, num_workers=2, worker_init_fn=fresh_lock)
    for batch in loader:
        print(batch.tolist(), flush=True)
