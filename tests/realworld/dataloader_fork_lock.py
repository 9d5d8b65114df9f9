"""torch DataLoader workers forked while a thread of the parent holds a lock the dataset takes.

Source: BaguaSys/bagua#35 ("remove logging in load balancing dataloader to avoid deadlock":
a lock held by another thread when the DataLoader forks its workers is inherited locked, with
no thread in the worker to release it); the hazard in general: the `os.fork` docs (a
multi-threaded process that forks: the child gets only the calling thread, so locks held by
the others stay held; DeprecationWarning since CPython 3.12) and pytorch/pytorch#75147
("Dataloader hangs. Potential deadlock when creating subprocess?").
Versions: CPython 3.11.7, torch 2.13.0+cpu (DataLoader, fork start method on Linux).
Hang: a cache-refresh thread holds CACHE_LOCK during a long update while the DataLoader forks
its two workers; each worker's __getitem__ waits for CACHE_LOCK forever (a futex wait, no
owner in the worker). The main process polls its data queue with a timeout (5 s) and checks
that its workers are alive: they are, so it waits forever. No output after "epoch 0".
Run: python dataloader_fork_lock.py
"""

import threading

import torch
from torch.utils.data import DataLoader, Dataset

CACHE_LOCK = threading.Lock()
refreshing = threading.Event()


def refresh_cache() -> None:
    with CACHE_LOCK:  # a long update (a download, a rebuild): the lock is held for it
        refreshing.set()
        threading.Event().wait(3600)


class Cached(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        with CACHE_LOCK:
            return torch.tensor([i])


if __name__ == "__main__":
    threading.Thread(target=refresh_cache, daemon=True).start()
    refreshing.wait()
    print("epoch 0", flush=True)
    for batch in DataLoader(Cached(), batch_size=2, num_workers=2):
        print(batch.tolist(), flush=True)
