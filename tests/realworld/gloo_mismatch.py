"""torch.distributed (gloo): two ranks in different collectives.

Source: Lightning-AI/pytorch-lightning#19106 "Deadlock on `log_dict` with different keys
across ranks" (https://github.com/Lightning-AI/pytorch-lightning/issues/19106): ranks whose
code paths differ enter different collectives and wait for each other; pytorch/pytorch#79901
(the fingerprint check TORCH_DISTRIBUTED_DEBUG=DETAIL adds for exactly this desync).
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend (default timeout 30 min).
Hang: rank 0 is in all_reduce, rank 1 in broadcast(src=1): each waits for the other's
message of its own collective, in gloo's socket reads, until the 30-minute timeout. The
launcher (this file without RANK) starts both ranks with RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT, as torchrun would, and waits for them.
Run: python gloo_mismatch.py
"""

import os
import socket
import subprocess
import sys


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(4)
    print(f"rank {rank}: step 1", flush=True)
    if rank == 0:
        dist.all_reduce(t)  # rank 0 logs a metric the other rank does not have
    else:
        dist.broadcast(t, src=1)
    dist.destroy_process_group()


def launch(world: int, started: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world)},
        )
        for r in range(started)
    ]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    if "RANK" in os.environ:
        rank_main()
    else:
        launch(world=2, started=2)
