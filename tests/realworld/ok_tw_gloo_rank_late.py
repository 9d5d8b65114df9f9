"""HEALTHY look-alike of tw_gloo_ddp_eval_rank0.py: rank 0 validates alone for about 6.6 s
with no collective inside, rank 1 waits in the barrier after it.

Source: pytorch/pytorch#54059 (validate on one rank, "use torch.distributed.barrier() to
make the other processes wait until validation is done"); jpata/particleflow#233 (the fix:
validation on a single rank must not go through a collective: "model.module() instead of
model()").
Versions: CPython 3.11.7, torch 2.13.0+cpu, gloo backend.
Looks like a hang: for about 6.6 s rank 1 waits in dist.barrier() (gloo, timeout 30 min)
while rank 0 sleeps between validation batches (a slow loader); the parent, which started
the ranks with multiprocessing's spawn as torch.multiprocessing.spawn does (without
importing torch itself, to start faster), waits in join(); no output.
Ends: rank 0 reaches the barrier, both ranks print and exit; exit 0.
Run: python ok_tw_gloo_rank_late.py
"""

import multiprocessing as mp
import socket
import sys
import time
from datetime import timedelta


def run(rank: int, world_size: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=30),
    )
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    loss = model(torch.randn(16, 8)).pow(2).mean().detach()
    dist.all_reduce(loss)  # the step's mean loss, every rank
    print(f"rank {rank}: step 0", flush=True)
    if rank == 0:  # validate on one rank only, no collective inside
        model.eval()
        with torch.no_grad():
            for _ in range(6):
                time.sleep(1.1)  # the next validation batch, from a slow loader
                model(torch.randn(16, 8))
        model.train()
    dist.barrier()  # the others wait until validation is done
    print(f"rank {rank}: done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    ranks = [ctx.Process(target=run, args=(r, 2, port)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in ranks))
